# dlshim build. `make` builds the library, daemon and CLI into build/;
# `make test` installs what it needs (scripts/install-deps.sh), builds and
# runs every test; sanitizer builds live in build/asan.
PREFIX ?= /usr/local
CC ?= cc
BUILD ?= build
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS ?= -O2 -g
CFLAGS += -std=gnu11 $(WARN) -Iinclude -fPIC -D_GNU_SOURCE -pthread
SAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

ENGINE_SRC := $(sort $(wildcard engine/*.c))
DAEMON_SRC := $(sort $(wildcard engine/daemon/*.c))
PEERS_SRC := $(sort $(wildcard engine/daemon/peers/*.c))
SHIM_SRC := $(sort $(wildcard shim/*.c))
CLI_SRC := $(sort $(wildcard tools/*.c))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
HELPER_SRC := $(sort $(wildcard tests/progs/*.c))

ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/obj/%.o)
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(BUILD)/obj/%.o)
PEERS_OBJ := $(PEERS_SRC:%.c=$(BUILD)/obj/%.o)
SHIM_OBJ := $(SHIM_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
ASAN_UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/asan/tests/%)
HELPER_BIN := $(HELPER_SRC:tests/progs/%.c=$(BUILD)/progs/%)

# HDF5 for the coordinator only: it reads rows of cached datasets. The shim
# never links it (it uses the host process's own HDF5, found at run time).
H5_CFLAGS := $(shell pkg-config --cflags hdf5 2>/dev/null || echo -I/usr/include/hdf5/serial)
H5_LIBS := $(shell pkg-config --libs hdf5 2>/dev/null || echo -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5)

LIB := $(BUILD)/libdlshim.so
ENGINE_LIB := $(BUILD)/libdlshim_engine.a
DAEMON := $(BUILD)/dlshimd
PEERS_MOD := $(BUILD)/dlshimd-peers.so
CLI := $(BUILD)/dlshim

.PHONY: demo all test unit unit-asan integration test-multinode deps bench bench-core bench-redirect bench-sampling bench-sampling-e2e bench-hdf5 bench-multinode fidelity install clean lint valgrind
all: $(LIB) $(DAEMON) $(PEERS_MOD) $(CLI) $(HELPER_BIN)

# The README's first command: set everything up and run the multi-job demo.
demo: deps
	$(MAKE) all
	scripts/demo.sh

$(BUILD)/obj/%.o: %.c $(wildcard include/dlshim/*.h engine/*.h shim/*.h engine/daemon/*.h engine/daemon/peers/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/engine/daemon/%.o: CFLAGS += $(H5_CFLAGS)
$(BUILD)/obj/engine/daemon/peers/%.o: CFLAGS += -Iengine/daemon

# The shim exports nothing but its wrappers (version script, hidden visibility).
$(BUILD)/obj/shim/%.o: CFLAGS += -fvisibility=hidden

$(ENGINE_LIB): $(ENGINE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIB): $(SHIM_OBJ) $(ENGINE_LIB) shim/exports.map
	$(CC) $(CFLAGS) -shared -Wl,--version-script=shim/exports.map -Wl,-z,defs -o $@ $(SHIM_OBJ) $(ENGINE_LIB) -ldl -lpthread

# The coordinator exports its symbols (and the whole engine) for the
# multi-node module, which it loads only when DLSHIM_PEERS is set, so that
# UCX and its memory hooks stay out of single-node coordinators.
$(DAEMON): $(DAEMON_OBJ) $(ENGINE_LIB)
	$(CC) $(CFLAGS) -rdynamic -o $@ $(DAEMON_OBJ) -Wl,--whole-archive $(ENGINE_LIB) -Wl,--no-whole-archive $(H5_LIBS) -lpthread -lunwind -ldl

$(PEERS_MOD): $(PEERS_OBJ)
	$(CC) $(CFLAGS) -shared -o $@ $(PEERS_OBJ) -lucp -lucs -lpthread

$(CLI): $(CLI_OBJ) $(ENGINE_LIB)
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(ENGINE_LIB) -lpthread

$(BUILD)/tests/%: tests/unit/%.c $(ENGINE_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iengine -o $@ $< $(ENGINE_LIB) -lcmocka -lpthread -lm

# test_pid includes the shim's pid cache itself.
$(BUILD)/tests/test_pid $(BUILD)/asan/tests/test_pid: shim/pid.c shim/shim.h

$(BUILD)/progs/%: tests/progs/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< -lpthread $(if $(findstring h5,$*),$(shell pkg-config --cflags --libs hdf5 2>/dev/null || echo -I/usr/include/hdf5/serial -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5),)

# The extent reader alone, checked byte for byte against ordinary reads.
$(BUILD)/progs/extent_check: tests/progs/extent_check.c engine/daemon/extent_read.c engine/daemon/extent_read.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iengine/daemon -o $@ tests/progs/extent_check.c engine/daemon/extent_read.c -lpthread

# Sanitizer build of the engine and its unit tests.
$(BUILD)/asan/obj/%.o: %.c $(wildcard include/dlshim/*.h engine/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -c $< -o $@
$(BUILD)/asan/libdlshim_engine.a: $(ENGINE_SRC:%.c=$(BUILD)/asan/obj/%.o)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/asan/tests/%: tests/unit/%.c $(BUILD)/asan/libdlshim_engine.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -Iengine -o $@ $< $(BUILD)/asan/libdlshim_engine.a -lcmocka -lpthread -lm

# The coordinator under ThreadSanitizer (its threads share the engine).
$(BUILD)/tsan/dlshimd: $(ENGINE_SRC) $(DAEMON_SRC) $(wildcard include/dlshim/*.h engine/*.h engine/daemon/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(H5_CFLAGS) -O1 -g -fsanitize=thread -o $@ $(DAEMON_SRC) $(ENGINE_SRC) $(H5_LIBS) -lpthread -lunwind -ldl

deps:
	scripts/install-deps.sh

# One closing line "N passed, N failed" for the whole run (tests/run-all.sh).
test: deps
	$(MAKE) all $(UNIT_BIN) $(ASAN_UNIT_BIN) $(BUILD)/tsan/dlshimd $(FUZZ_REPLAY_BIN)
	tests/run-all.sh

unit: $(UNIT_BIN)
	tests/run-all.sh --only unit
unit-asan: $(ASAN_UNIT_BIN)
	tests/run-all.sh --only unit-asan
integration: all
	tests/run-all.sh --only integration

# Three coordinators in network namespaces form one cache over UCX (needs
# root; `make test` runs it with the other integration tests).
test-multinode: all
	tests/integration/test_multinode.sh

valgrind: all $(UNIT_BIN)
	tests/run-all.sh --only valgrind

bench: bench-core bench-redirect
bench-core: all
	bench/bench_core.sh
bench-redirect: all
	bench/bench_redirect.sh
# Random HDF5 rows: plain h5py vs shim exact vs row redirect (docs/bench-hdf5.md).
bench-hdf5: all
	bench/bench_hdf5.sh

# Multi-node cache over network namespaces: prefetch on/off, 1-3 nodes (docs/bench-multinode.md).
bench-multinode: all
	bench/bench_multinode.sh

# Test accuracy under exact and redirect modes (docs/fidelity.md).
fidelity: deps all
	/usr/bin/python3 bench/fidelity.py

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/dlshim $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 0755 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 0755 $(DAEMON) $(CLI) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/lib/dlshim
	install -m 0755 $(PEERS_MOD) $(DESTDIR)$(PREFIX)/lib/dlshim/
	install -m 0644 include/dlshim/*.h $(DESTDIR)$(PREFIX)/include/dlshim/
	sed -e 's|@PREFIX@|$(PREFIX)|g' dlshim.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/dlshim.pc

lint:
	clang-format --dry-run --Werror $(ENGINE_SRC) $(SHIM_SRC) $(DAEMON_SRC) $(CLI_SRC) || true
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability -Iinclude engine shim tools

clean:
	rm -rf $(BUILD)
# ---- fuzzing (tests/fuzz): libFuzzer targets built with clang into build/fuzz/,
# and a gcc + ASan/UBSan replay of the seed corpora (no libFuzzer) in build/asan/fuzz/
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_TARGETS := proto config peer
FUZZ_BIN := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
FUZZ_REPLAY_BIN := $(FUZZ_TARGETS:%=$(BUILD)/asan/fuzz/replay_%)
FUZZ_CFLAGS := -std=gnu11 -g -O1 -Wall -Wextra -Iinclude -D_GNU_SOURCE -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
.PHONY: fuzz fuzz-build fuzz-replay

$(BUILD)/fuzz/fuzz_proto: tests/fuzz/fuzz_proto.c engine/proto.c include/dlshim/proto.h
$(BUILD)/fuzz/fuzz_config: tests/fuzz/fuzz_config.c engine/config.c include/dlshim/config.h
$(BUILD)/fuzz/fuzz_peer: tests/fuzz/fuzz_peer.c engine/daemon/peers/peer_wire.c $(wildcard engine/daemon/peers/peer_*.h)
$(FUZZ_BIN):
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^)
fuzz-build: $(FUZZ_BIN)
# Each target for FUZZ_SECONDS from the seed corpus; new inputs go to
# build/fuzz/corpus-<t>/, crashes to build/fuzz/artifacts-<t>/ (make fails).
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p $(BUILD)/fuzz/corpus-$$t $(BUILD)/fuzz/artifacts-$$t && \
		echo "== fuzz_$$t for $(FUZZ_SECONDS) s" && \
		$(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			-artifact_prefix=$(BUILD)/fuzz/artifacts-$$t/ \
			$(BUILD)/fuzz/corpus-$$t tests/fuzz/corpus/$$t || exit 1; \
	done

# Only the engine objects a target exercises, so an unrelated engine file cannot break it.
$(BUILD)/asan/fuzz/replay_proto: tests/fuzz/replay.c tests/fuzz/fuzz_proto.c $(BUILD)/asan/obj/engine/proto.o
$(BUILD)/asan/fuzz/replay_config: tests/fuzz/replay.c tests/fuzz/fuzz_config.c $(BUILD)/asan/obj/engine/config.o
$(BUILD)/asan/fuzz/replay_peer: tests/fuzz/replay.c tests/fuzz/fuzz_peer.c $(BUILD)/asan/obj/engine/daemon/peers/peer_wire.o
$(FUZZ_REPLAY_BIN):
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -o $@ $^ -lpthread
# Seeds as they are plus 20000 deterministic mutations of each.
fuzz-replay: $(FUZZ_REPLAY_BIN)
	@for t in $(FUZZ_TARGETS); do $(BUILD)/asan/fuzz/replay_$$t -m 20000 tests/fuzz/corpus/$$t || exit 1; done

# Shared sampling in a cache simulator and the sampling tree's costs
# (docs/bench-sampling.md): CSVs in bench/results, plots in docs/img.
$(BUILD)/bench_sampling: bench/bench_sampling.c $(ENGINE_LIB)
	$(CC) $(CFLAGS) -Iengine -o $@ $< $(ENGINE_LIB) -lm
bench-sampling: $(BUILD)/bench_sampling
	$(BUILD)/bench_sampling misses bench/results/sampling_misses.csv
	$(BUILD)/bench_sampling tree bench/results/sampling_tree.csv 128
	/usr/bin/python3 bench/plot_sampling.py bench/results docs/img
# End to end: concurrent jobs on throttled storage, plain vs lockstep vs dir
# vs dsa (docs/bench-sampling.md; about 15 minutes; needs root for cgroups).
bench-sampling-e2e: all
	bench/bench_sampling_e2e.sh
