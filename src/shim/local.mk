## src/shim: the exported wrappers of libc, one file per family.
librsock_la_SOURCES += \
	src/shim/shim.h \
	src/shim/socket.c \
	src/shim/io.c \
	src/shim/io.h \
	src/shim/splice.c \
	src/shim/poll.c \
	src/shim/epoll.c \
	src/shim/fd.c \
	src/shim/proc.c \
	src/shim/api.c
