## src/core: the descriptor table and the per-stream object.
librsock_core_la_SOURCES += \
	src/core/fdtab.c \
	src/core/fdtab.h \
	src/core/conn.c \
	src/core/conn.h \
	src/core/exec.c \
	src/core/exec.h
