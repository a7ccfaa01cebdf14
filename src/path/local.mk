## src/path: the paths a stream travels on (path/rdma: the RDMA path) and the hand-over to TCP.
librsock_core_la_SOURCES += \
	src/path/handover.c \
	src/path/handover.h \
	src/path/rdma/transport.c \
	src/path/rdma/transport.h
