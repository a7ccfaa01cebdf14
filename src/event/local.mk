## src/event: readiness: poll, select and epoll over streams on any path.
librsock_core_la_SOURCES += \
	src/event/event.c \
	src/event/event.h \
	src/event/epoll.h \
	src/event/epoll/internal.h \
	src/event/epoll/instance.c \
	src/event/epoll/item.c \
	src/event/epoll/ctl.c \
	src/event/epoll/wait.c
