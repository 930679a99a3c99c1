/* One packet, one optional descriptor (see packet.h). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "dlshim/packet.h"

int dlshim_send_packet(int sock, const void *buf, size_t n, int pass_fd)
{
	struct iovec iov = {(void *)buf, n};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	char ctl[CMSG_SPACE(sizeof(int))];
	if (pass_fd >= 0) {
		memset(ctl, 0, sizeof(ctl));
		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	ssize_t r;
	do
		r = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	return r == (ssize_t)n ? 0 : -1;
}

ssize_t dlshim_recv_packet(int sock, void *buf, size_t cap, int fds[DLSHIM_PACKET_MAX_FDS], int *nfds,
			   int *truncated)
{
	struct iovec iov = {buf, cap};
	char ctl[CMSG_SPACE(sizeof(int) * DLSHIM_PACKET_MAX_FDS)];
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
	ssize_t r;
	*nfds = 0;
	*truncated = 0;
	do
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && *nfds < DLSHIM_PACKET_MAX_FDS; i++)
			memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	*truncated = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
	return r;
}
