## src/negotiate: choosing a path for a stream: probe, beacon, hello, client and server.
librsock_core_la_SOURCES += \
	src/negotiate/addr.c \
	src/negotiate/beacon.c \
	src/negotiate/client.c \
	src/negotiate/cm.h \
	src/negotiate/dataconn.c \
	src/negotiate/devices.c \
	src/negotiate/hello.c \
	src/negotiate/internal.h \
	src/negotiate/negcache.c \
	src/negotiate/probe.c \
	src/negotiate/rdmacm.c \
	src/negotiate/server.c \
	src/negotiate/shmdisc.c \
	src/negotiate/shmsetup.c \
	src/negotiate/thread.c \
	src/negotiate/tuples.c \
	src/negotiate/ucm.c \
	src/negotiate/ucm.h
