/* runtime/comm/local.c — the local implementation: one process, world
 * size 1. Every group is this rank alone, so every operation is the copy
 * comm.c makes for groups of one (and send/recv to oneself go through its
 * loopback queue); there is no transport and nothing to load. A mesh of
 * more than one rank is refused by rt_comm_set_mesh with the mpirun line
 * to use. */
#include "comm_internal.h"

const comm_backend rt_comm_local_backend = {
    .name = "local",
};
