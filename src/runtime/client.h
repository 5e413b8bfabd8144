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

#endif /* VSR_RUNTIME_CLIENT_H */
