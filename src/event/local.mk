## src/event: readiness: poll, select and epoll over streams on any path.
librsock_core_la_SOURCES += \
	src/event/event.c \
	src/event/event.h \
	src/event/epoll.c \
	src/event/epoll.h
