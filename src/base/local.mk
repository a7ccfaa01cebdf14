## src/base: leaf utilities: logging, libc entry points, rdma-core loaded on first need, configuration, fault injection, rules, counters, rings, the wire format.
librsock_core_la_SOURCES += \
	src/base/compiler.h \
	src/base/clock.h \
	src/base/fdbits.c \
	src/base/fdbits.h \
	src/base/ownfd.c \
	src/base/ownfd.h \
	src/base/proc.c \
	src/base/proc.h \
	src/base/log.c \
	src/base/mtx.c \
	src/base/mtx.h \
	src/base/log.h \
	src/base/real.c \
	src/base/real.h \
	src/base/rdmacore.c \
	src/base/rdmacore.h \
	src/base/config.c \
	src/base/config.h \
	src/base/fault.c \
	src/base/fault.h \
	src/base/rules.c \
	src/base/rules.h \
	src/base/stats.c \
	src/base/stats.h \
	src/base/statpub.c \
	src/base/statpub.h \
	src/base/ring.c \
	src/base/ring.h \
	src/base/proto.c \
	src/base/proto.h
