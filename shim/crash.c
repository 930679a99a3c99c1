/* Crash reports of the host process, only with DLSHIM_LOG=debug: on
 * SIGSEGV, SIGBUS or SIGABRT a backtrace goes to stderr, then the signal is
 * re-raised with its default action, so the exit status, core dump and
 * parent's view are what they would be without the shim. A handler the
 * program installed itself is never replaced. */
#include <libunwind.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "real.h"
#include "shim.h"

static struct unwind_fns uw;

static void put(const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(2, s, n);
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

static void on_fatal(int sig)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "dlshim[%d]: fatal signal %d (%s); backtrace:\n", (int)getpid(), sig,
			 sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGABRT");
	put(line, (size_t)n);
	unw_context_t ctx;
	unw_cursor_t cur;
	if (uw.getcontext(&ctx) == 0 && uw.init_local(&cur, &ctx) == 0) {
		for (int depth = 0; depth < 64 && uw.step(&cur) > 0; depth++) {
			unsigned long ip = 0, off = 0;
			char name[160] = "?";
			uw.get_reg(&cur, UNW_REG_IP, &ip);
			if (uw.get_proc_name(&cur, name, sizeof(name), &off) != 0)
				strcpy(name, "?");
			n = snprintf(line, sizeof(line), "  #%d 0x%lx %s+0x%lx\n", depth, ip, name, off);
			put(line, (size_t)n);
		}
	}
	/* SA_RESETHAND put the default action back: raising again (or
	 * returning to the faulting instruction) ends the process as before. */
	raise(sig);
}

void crash_install(void)
{
	if (g_cfg.log_level < DLSHIM_LOG_DEBUG || real_load_unwind(&uw) < 0)
		return;
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old, sa;
		if (sigaction(sigs[i], NULL, &old) < 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
			continue; /* the program's own handler stays */
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_fatal;
		sa.sa_flags = SA_RESETHAND | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
}
