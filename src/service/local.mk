## src/service: the library's thread, a generic loop over watched descriptors and per-turn work.
librsock_core_la_SOURCES += \
	src/service/service.c \
	src/service/service.h
