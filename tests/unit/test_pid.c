/* Unit test of the shim's pid cache (shim/pid.c): right in the process
 * that filled it, and in a child made by fork() or by a raw clone system
 * call (no atfork handlers run), which must never see its parent's pid. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../shim/pid.c"

/* In the child: is shim_pid() the child's own pid? Sent back by pipe. */
static void child_reports(int fd)
{
	int ok = shim_pid() == (pid_t)syscall(SYS_getpid) && shim_pid() == (pid_t)syscall(SYS_getpid);
	if (write(fd, &ok, sizeof(ok)) != (ssize_t)sizeof(ok))
		_exit(2);
	_exit(0);
}

static void check_child(pid_t c, int fd)
{
	assert_true(c > 0);
	int ok = 0, status = 0;
	assert_int_equal(read(fd, &ok, sizeof(ok)), (ssize_t)sizeof(ok));
	assert_int_equal(waitpid(c, &status, 0), c);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(ok, 1);
}

static void test_pid_survives_fork_and_clone(void **st)
{
	(void)st;
	assert_int_equal(shim_pid(), getpid());
	assert_int_equal(shim_pid(), getpid()); /* from the cache now */
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t c = fork();
	if (c == 0)
		child_reports(p[1]);
	check_child(c, p[0]);
	/* A raw clone: no atfork handler runs, only the wiped page tells. */
	c = (pid_t)syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0);
	if (c == 0)
		child_reports(p[1]);
	check_child(c, p[0]);
	assert_int_equal(shim_pid(), getpid());
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pid_survives_fork_and_clone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
