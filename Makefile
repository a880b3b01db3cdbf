# vramplan — one plain Makefile: `make` builds build/vramplan and the Lua
# module build/vramplan.so; `make test` runs every test tier; `make run`
# installs what is missing, builds and runs the built-in example.

CC       ?= cc
PREFIX   ?= /usr/local
CFLAGS   ?= -O2 -g
WARNINGS := -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpedantic
LUA_CFLAGS := $(shell pkg-config --cflags lua5.4 2>/dev/null)
LUA_LIBS   := $(shell pkg-config --libs lua5.4 2>/dev/null)
# engine/ by layer, lowest first: core (dtypes, the simulator, the ledger,
# PyTorch's primitives, the allocator), policy (recipe, precision,
# optimizers, sharding, fine-tuning methods), model (the architecture and
# the op registry), ops (one file per op kind), step (the step driver, the
# update, the pipeline's estimate, the time model), lua (the binding and
# the command); headers are included by name from every layer
LAYERS   := core policy model ops step lua
comma    := ,
ENGINE   := $(addprefix engine/,$(LAYERS))
vpath %.c $(ENGINE)
ALL_CFLAGS = $(WARNINGS) $(CFLAGS) $(LUA_CFLAGS) $(addprefix -I,$(ENGINE)) -MMD -MP
SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# every engine/*/*.c is plain C without Lua but engine/lua/ (the binding
# and main.c): a new op is its file in engine/ops (and its line in op_list.h)
SOURCES := $(basename $(notdir $(wildcard $(addsuffix /*.c,$(ENGINE)))))
# the command alone (not the module): main.c and the searcher of the Lua
# library it carries compiled (embedded.c, build/gen/embedded_lua.c)
COMMAND := main embedded
BINDING := $(filter-out $(COMMAND),$(basename $(notdir $(wildcard engine/lua/*.c))))
CORE    := $(filter-out $(COMMAND) $(BINDING),$(SOURCES))
CORE_OBJ    := $(CORE:%=build/obj/%.o)
BINDING_OBJ := $(BINDING:%=build/obj/%.o)
PIC_OBJ     := $(CORE:%=build/pic/%.o) $(BINDING:%=build/pic/%.o)
SAN_OBJ     := $(CORE:%=build/san/%.o)
C_TESTS     := $(patsubst tests/c/%.c,build/tests/%,$(wildcard tests/c/test_*.c))

.PHONY: all run test test-c test-lua test-torch install clean bench docs docs-png fuzz fuzz-short
all: build/vramplan build/vramplan.so

build/obj/%.o: %.c | build/obj
	$(CC) $(ALL_CFLAGS) -c $< -o $@
build/pic/%.o: %.c | build/pic
	$(CC) $(ALL_CFLAGS) -fPIC -c $< -o $@
build/san/%.o: %.c | build/san
	$(CC) $(ALL_CFLAGS) $(SANITIZE) -O1 -c $< -o $@

build/vramplan: build/obj/main.o build/obj/embedded.o build/gen/embedded_lua.o $(CORE_OBJ) $(BINDING_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LUA_LIBS) -lm

# The Lua library the command loads, compiled ahead of time (the project's
# own modules and the two system ones it starts with, and the architecture
# scripts; a file whose text is not the one compiled in is read as before):
# tools/embed_lua.lua
LIB_LUA := $(sort $(shell find scripts/lib -name '*.lua'))
SYSTEM_LUA = $(shell lua5.4 -e "for _, m in ipairs({'argparse', 'dkjson'}) do \
  local p = package.searchpath(m, package.path) if p then io.write(m, '=', p, ' ') end end" 2>/dev/null)
ARCH_LUA := $(sort $(wildcard models/arch/*.lua))
build/gen/embedded_lua.c: tools/embed_lua.lua $(LIB_LUA) $(ARCH_LUA) $(foreach m,$(SYSTEM_LUA),$(lastword $(subst =, ,$(m)))) | build/gen
	lua5.4 tools/embed_lua.lua $@ $(foreach f,$(LIB_LUA),$(subst /,.,$(patsubst scripts/lib/%.lua,%,$(f)))=$(f)) \
	    $(SYSTEM_LUA) --scripts $(ARCH_LUA)
build/gen/embedded_lua.o: build/gen/embedded_lua.c engine/lua/embedded.h
	$(CC) $(CFLAGS) $(LUA_CFLAGS) -Iengine/lua -c $< -o $@
build/vramplan.so: $(PIC_OBJ)
	$(CC) $(CFLAGS) -shared -o $@ $^ -lm
build/libmemcount.so: tests/torch/memcount.c | build
	$(CC) -O2 -shared -fPIC -o $@ $< -ldl -lpthread
build/tests/%: tests/c/%.c tests/c/check.h $(SAN_OBJ) | build/tests
	$(CC) $(ALL_CFLAGS) $(SANITIZE) -O1 -Itests/c -o $@ $< $(SAN_OBJ) -lm

# the sanitizer objects are shared by every C test: keep them between runs
.SECONDARY: $(SAN_OBJ)

# ---- the fuzz target (docs/fuzzing.md): libFuzzer through clang, under
# AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer, its
# objects in build/fuzz/ apart from the other builds ----
FUZZ_CC    := clang
FUZZ_SAN   := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_OBJ   := $(CORE:%=build/fuzz/%.o) $(BINDING:%=build/fuzz/%.o)
FUZZ_EXE   := build/fuzz/fuzz_import
FUZZ_RUNS  ?= 10000000
FUZZ_TIME  ?= 86400
FUZZ_SHORT ?= 60
FUZZ_OPTS  := -dict=$(CURDIR)/tests/fuzz/import.dict -timeout=25 -rss_limit_mb=4096 -detect_leaks=1 -print_final_stats=1 \
              -artifact_prefix=$(CURDIR)/build/fuzz/artifacts/
FUZZ_ENV   := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# The core's objects are instrumented for edge coverage without trace-cmp:
# its integer comparisons' operands (binary words) do not help mutate text
# inputs, and their callbacks took a quarter of the target's time
# (docs/fuzzing.md). Rebuilt when this file changes, so a flag change here
# reaches them.
build/fuzz/%.o: %.c Makefile | build/fuzz
	$(FUZZ_CC) $(ALL_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -fno-sanitize-coverage=trace-cmp -O1 -g -c $< -o $@
$(FUZZ_EXE): tests/fuzz/fuzz_import.c $(FUZZ_OBJ) | build/fuzz
	$(FUZZ_CC) $(ALL_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -O1 -g -DVRAMPLAN_TREE='"$(CURDIR)"' -o $@ $< $(FUZZ_OBJ) \
	    $(LUA_LIBS) -lm
build/fuzz/seeds: tests/fuzz/seeds.sh $(wildcard tests/fixtures/*.json models/*.lua models/arch/*.lua scripts/recipes/*.lua) \
                  $(shell find tests/fixtures/configs -name '*.json' -o -name '*.y*ml')
	rm -rf $@ && sh tests/fuzz/seeds.sh $@

# On demand: ten million inputs (or FUZZ_TIME seconds), the corpus kept in
# build/fuzz/corpus between runs; a finding is written to build/fuzz/artifacts/.
# FUZZ_JOBS=N runs N processes on the shared corpus, FUZZ_RUNS/N inputs each
# (their logs in build/fuzz/fuzz-*.log).
FUZZ_JOBS  ?= 1
FUZZ_PAR   := $(if $(filter-out 1,$(FUZZ_JOBS)),-jobs=$(FUZZ_JOBS) -workers=$(FUZZ_JOBS))
fuzz: $(FUZZ_EXE) build/fuzz/seeds
	mkdir -p build/fuzz/corpus build/fuzz/artifacts
	cd build/fuzz && $(FUZZ_ENV) $(CURDIR)/$(FUZZ_EXE) $(FUZZ_OPTS) $(FUZZ_PAR) -runs=$$(( $(FUZZ_RUNS) / $(FUZZ_JOBS) )) \
	    -max_total_time=$(FUZZ_TIME) corpus seeds

# In `make test`: the regressions (inputs that once failed), then a minute
# of fuzzing from the seeds alone.
fuzz-short: $(FUZZ_EXE) build/fuzz/seeds
	mkdir -p build/fuzz/short build/fuzz/artifacts
	$(FUZZ_ENV) $(FUZZ_EXE) $(FUZZ_OPTS) tests/fuzz/regressions/*
	rm -rf build/fuzz/short/*
	$(FUZZ_ENV) $(FUZZ_EXE) $(FUZZ_OPTS) -max_total_time=$(FUZZ_SHORT) build/fuzz/short build/fuzz/seeds

build build/obj build/pic build/san build/tests build/fuzz build/gen:
	mkdir -p $@

# ---- the two commands of the README ----
# Each installs what is missing first, then builds in a fresh make, so that
# pkg-config answers once the packages are there.
run:
	@sh scripts/install-deps.sh run
	@$(MAKE) --no-print-directory all
	./build/vramplan estimate models/llama2-7b.lua --recipe scripts/recipes/full-bf16-adamw.lua --gpu a100-80gb

test:
	@sh scripts/install-deps.sh test
	@$(MAKE) --no-print-directory all build/libmemcount.so
	@$(MAKE) --no-print-directory test-c test-lua test-torch fuzz-short

# no dependency circle among engine/'s objects of more than four files
# (issue 20), and no file using a later layer's: ops reach the step only
# through its services (op_context.h: step_state.c, step_tensors.c,
# checkpoint.c; compile_region.c for a compiled loss)
DEPCYCLES_MAX := 4
DEPCYCLES := --max $(DEPCYCLES_MAX) --layers $(subst $(eval) ,$(comma),$(LAYERS)) --services step_state,step_tensors,checkpoint,compile_region

OP_SEES = $(WARNINGS) $(addprefix -I,$(ENGINE)) -fsyntax-only

test-c: $(C_TESTS) $(CORE_OBJ) $(BINDING_OBJ) build/obj/main.o build/obj/embedded.o
	@set -e; for t in $(C_TESTS); do echo "== $$t"; $$t; done
	/usr/bin/python3 tools/depcycles.py $(DEPCYCLES) build/obj
	@# an op sees the public step and the tensor table, never the driver's own state
	$(CC) $(OP_SEES) -DREACH=0 tests/c/op_sees.c
	@for r in 1 2; do if $(CC) $(OP_SEES) -DREACH=$$r tests/c/op_sees.c 2>/dev/null; then \
	    echo "tests/c/op_sees.c: an op reached the step's private state (REACH=$$r)"; exit 1; fi; done

test-lua: all
	/usr/bin/python3 tools/megatron_report.py --check tests/reference/megatron_report.json
	lua5.4 /usr/bin/busted -o utfTerminal tests/lua

test-torch: all build/libmemcount.so
	/usr/bin/python3 tests/torch/compare.py

# docs/example.png, the README's picture: make run's example drawn with
# --plot, photographed by headless Chromium at the figure's own size
EXAMPLE := models/llama2-7b.lua --recipe scripts/recipes/full-bf16-adamw.lua --gpu a100-80gb
docs-png: all
	./build/vramplan estimate $(EXAMPLE) --plot build/example.svg >/dev/null
	chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=build/chromium-profile \
	    --window-size=$$(sed -n 's/^<svg[^>]* height="\([0-9]*\)".* width="\([0-9]*\)".*/\2,\1/p' build/example.svg) \
	    --screenshot=docs/example.png file://$(CURDIR)/build/example.svg 2>/dev/null

# the generated references in docs/ (a test checks they are current)
docs: all
	./build/vramplan keys --markdown > docs/recipe-keys.md

bench: all
	lua5.4 bench/cli.lua
	lua5.4 bench/estimate.lua
	lua5.4 bench/sweep.lua
	lua5.4 bench/sweep_parts.lua
	lua5.4 bench/blocks.lua

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/vramplan $(DESTDIR)$(PREFIX)/lib/lua/5.4
	install -m 755 build/vramplan $(DESTDIR)$(PREFIX)/bin/vramplan
	install -m 644 build/vramplan.so $(DESTDIR)$(PREFIX)/lib/lua/5.4/vramplan.so
	cp -r models scripts hardware $(DESTDIR)$(PREFIX)/share/vramplan/

clean:
	rm -rf build

-include $(wildcard build/obj/*.d build/pic/*.d build/san/*.d build/tests/*.d build/fuzz/*.d)
