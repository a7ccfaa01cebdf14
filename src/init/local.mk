## src/init: the constructor, the ordered table of fork hooks, the destructor.
librsock_core_la_SOURCES += \
	src/init/init.c \
	src/init/init.h
