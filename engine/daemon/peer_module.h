/* The coordinator's door to the multi-node cache. The UCX transport lives
 * in a module (dlshimd-peers.so, engine/daemon/peers/) that is loaded only
 * when DLSHIM_PEERS is set: linking UCX into every coordinator would put
 * its memory hooks (mmap, madvise, ...) into single-node runs too. */
#ifndef DLSHIM_PEER_MODULE_H
#define DLSHIM_PEER_MODULE_H

#include <stddef.h>

#include "dlshim/proto.h"

struct session;

/* Load the module and start the transport when peers are configured.
 * 1: no peers; 0: started; -1: not available (logged, in peer_module_json). */
int peer_module_start(void);
int peer_module_enabled(void);
/* As remote_open (peers/peer.h); -1 when multi-node is off. */
int peer_module_remote_open(struct session *s, const char *path, struct dlshim_msg_open_r *r, int *sfd);
/* The "peers" object of the stats JSON. */
size_t peer_module_json(char *buf, size_t cap);

/* Names of the verbs devices on this machine, comma-separated ("" when none
 * or libibverbs is absent; it is loaded at run time). rdma_devs.c. */
const char *rdma_devices(void);

/* `s` made safe inside a JSON string (quotes, backslashes, controls -> ?). */
void peer_json_str(char *out, size_t cap, const char *s);

#endif
