## src/core: the descriptor table, the per-stream object and initialisation.
librsock_core_la_SOURCES += \
	src/core/init.c \
	src/core/init.h \
	src/core/fdtab.c \
	src/core/fdtab.h \
	src/core/conn.c \
	src/core/conn.h
