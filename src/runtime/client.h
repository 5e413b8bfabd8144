/*
 * client.h — private to runtime/: the router's client of the runtime and
 * its supervisor are declared in the public header (runtime.h, "the
 * router's side"); their implementations (client.c, supervisor.c) and
 * their unit tests use libuv's own types with them.
 */
#ifndef VSR_RUNTIME_CLIENT_H
#define VSR_RUNTIME_CLIENT_H

#include <uv.h>

#include "runtime/runtime.h"

/* The process at the other end of a connected Unix socket (SO_PEERCRED, or
 * LOCAL_PEERPID), or -1 when it cannot be told. */
int vsr__rt_peer_pid(const uv_stream_t *s);

#endif /* VSR_RUNTIME_CLIENT_H */
