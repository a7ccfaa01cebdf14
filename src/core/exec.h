/* exec.h - handing RDMA streams that moved to kernel TCP to an exec'd image
 * (doc/design.md, "Descriptors, fork, exec"): the environment entry that
 * names their prefixes, and its adoption in the new image. */
#ifndef RSOCK_CORE_EXEC_H
#define RSOCK_CORE_EXEC_H

#define HO_ENV "RSOCK_HANDOVER"

/* Before an exec: the environment for the new image, envp plus HO_ENV naming
 * the prefixes of the sockets that survive it (which prepare() switched).
 * Returns envp itself when nothing is to be handed over, a new array (free
 * with ho_exec_env_free) otherwise, or NULL (out of memory: exec anyway). */
char **ho_exec_env(char *const envp[]);
/* The exec failed: free what ho_exec_env returned for envp and close the
 * descriptors it made for the new image. */
void ho_exec_env_free(char **env, char *const envp[]);

/* In a new image: adopt the sockets named by HO_ENV (their prefixes come
 * first, then the kernel socket), and remove the variable. */
void ho_adopt_env(void);

#endif
