## src/path: the paths a stream travels on (path/rdma: the RDMA path) and the hand-over to TCP.
librsock_core_la_SOURCES += \
	src/path/adapt.h \
	src/path/handover.h \
	src/path/prefix.c \
	src/path/prefix.h \
	src/path/path.h \
	src/path/registry.c \
	src/path/registry.h \
	src/path/vfork.c \
	src/path/vfork.h \
	src/path/rdma/cache.c \
	src/path/rdma/close.c \
	src/path/rdma/failover.c \
	src/path/rdma/flow.c \
	src/path/rdma/flow.h \
	src/path/rdma/internal.h \
	src/path/rdma/ops.c \
	src/path/rdma/post.c \
	src/path/rdma/ready.c \
	src/path/rdma/recv.c \
	src/path/rdma/send.c \
	src/path/rdma/setup.c \
	src/path/rdma/switch.c \
	src/path/rdma/switched.c \
	src/path/rdma/transport.h \
	src/path/rdma/wait.c \
	src/path/rdma/zcopy.c \
	src/path/shm/child.c \
	src/path/shm/data.c \
	src/path/shm/internal.h \
	src/path/shm/ops.c \
	src/path/shm/ring.c \
	src/path/shm/ring.h \
	src/path/shm/shm.h \
	src/path/shm/stream.c \
	src/path/shm/switch.c
