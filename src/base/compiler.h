/* compiler.h - attributes and small helpers shared by every module. */
#ifndef RSOCK_COMPILER_H
#define RSOCK_COMPILER_H

#define RSOCK_EXPORT __attribute__((visibility("default")))
#define RSOCK_HIDDEN __attribute__((visibility("hidden")))
#define RSOCK_LIKELY(x) __builtin_expect(!!(x), 1)
#define RSOCK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RSOCK_COLD __attribute__((cold, noinline))
#define RSOCK_NOINLINE __attribute__((noinline))
#define RSOCK_MAYBE_UNUSED __attribute__((unused))
#define RSOCK_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
