## src/path: the paths a stream travels on (path/rdma: the RDMA path) and the hand-over to TCP.
librsock_core_la_SOURCES += \
	src/path/handover.h \
	src/path/prefix.c \
	src/path/prefix.h \
	src/path/registry.c \
	src/path/registry.h \
	src/path/vfork.c \
	src/path/vfork.h \
	src/path/rdma/transport.c \
	src/path/rdma/transport.h
