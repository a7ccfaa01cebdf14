/* init.h - the library's initialisation: the constructor's state machine
 * (base/proc.h holds the state itself), the ordered table of fork hooks,
 * and the destructor. */
#ifndef RSOCK_INIT_H
#define RSOCK_INIT_H

#include "base/proc.h"

/* Run or wait for initialisation. Returns the state reached: READY normally,
 * BROKEN when libc lacks a required symbol, RUNNING or RESOLVED when called
 * re-entrantly from the initialising thread itself. */
int rsock_init(void);

#endif
