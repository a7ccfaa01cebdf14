## src/negotiate: choosing a path for a stream: probe, beacon, hello, client and server.
librsock_core_la_SOURCES += \
	src/negotiate/cm.c \
	src/negotiate/cm.h \
	src/negotiate/ucm.c \
	src/negotiate/ucm.h
