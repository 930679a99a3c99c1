/* Sending and receiving one SOCK_SEQPACKET packet with an optional file
 * descriptor (SCM_RIGHTS), shared by the shim, the coordinator and the CLI.
 * Both retry EINTR; sending never raises SIGPIPE. No descriptor is closed
 * here (the shim must close through its real-function table). */
#ifndef DLSHIM_PACKET_H
#define DLSHIM_PACKET_H

#include <stddef.h>
#include <sys/types.h>

#define DLSHIM_PACKET_MAX_FDS 4

/* Send `n` bytes as one packet, with `pass_fd` attached when >= 0. */
int dlshim_send_packet(int sock, const void *buf, size_t n, int pass_fd);

/* Receive one packet into `buf`. Descriptors that came with it are stored
 * in fds[] (MSG_CMSG_CLOEXEC) and counted in *nfds; the caller owns them.
 * *truncated is set when the packet or its control data did not fit.
 * Returns the packet length, 0 at end of stream, -1 on error. */
ssize_t dlshim_recv_packet(int sock, void *buf, size_t cap, int fds[DLSHIM_PACKET_MAX_FDS], int *nfds,
			   int *truncated);

#endif
