# pvfs front door.  `make` builds user space (CMake + Ninja), `make kmod`
# builds pvfs.ko, `make check` runs every test.  `make help` lists targets.

SHELL := /bin/bash
SRC := $(CURDIR)

# SANITIZE=1 builds user space with ASan + UBSan into its own tree.
ifeq ($(SANITIZE),1)
BUILD ?= $(SRC)/build-san
CMAKE_FLAGS += -DPVFS_SANITIZE=ON
else
BUILD ?= $(SRC)/build
endif
KMOD_OUT ?= $(SRC)/build/kmod
CMAKE_FLAGS += -DPVFS_KMOD_DIR=$(KMOD_OUT)

# Kernels for `make kmod`: KDIR if given, else the running kernel's build
# directory if it has one, else every installed kernel's headers.
ALL_KDIRS := $(patsubst %/Makefile,%,$(wildcard /lib/modules/*/build/Makefile))
RUNNING_KDIR := $(patsubst %/Makefile,%,$(wildcard /lib/modules/$(shell uname -r)/build/Makefile))
ifdef KDIR
KDIRS := $(KDIR)
else
KDIRS := $(or $(RUNNING_KDIR),$(ALL_KDIRS))
endif
# C=1 additionally runs sparse over every file; any warning fails the build.
KBUILD_FLAGS := --werror $(if $(filter 1 2,$(C)),--sparse)

.PHONY: fuzz fuzz-build
.PHONY: all deps configure kmod kmod-test check check-full up down vm-shell lint format dkms-install deb clean help bench bench-net bench-fs bench-kernel bench-ib

all: configure
	@ninja -C $(BUILD)

configure: $(BUILD)/build.ninja

$(BUILD)/build.ninja: CMakeLists.txt $(wildcard */CMakeLists.txt */*/CMakeLists.txt */*/*/CMakeLists.txt)
	@cmake -S $(SRC) -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

kmod:
	@[ -n "$(KDIRS)" ] || { echo "make kmod: no kernel headers found; run scripts/deps or pass KDIR=" >&2; exit 1; }
	@scripts/kbuild $(KBUILD_FLAGS) --include include --src kmod --out $(KMOD_OUT) $(KDIRS)

# What the VM tests need: pvfs.ko and the rig's WARN_ON module for every
# installed kernel, whatever the running one is, built with sparse.
kmod-test:
	@scripts/kbuild --werror --sparse --include include --src kmod --out $(KMOD_OUT) $(ALL_KDIRS)
	@scripts/kbuild --werror --sparse --src tests/vm/warnmod --out $(KMOD_OUT)-test $(ALL_KDIRS)

check:
	@BUILD=$(BUILD) scripts/check

check-full:
	@BUILD=$(BUILD) scripts/check --full

# A local cluster (1 metadata + 3 data servers on 127.0.0.1, storage in
# ./run/), mounted at /mnt/pvfs: on this kernel when it can load pvfs.ko
# (built here first when it has headers), else through FUSE (pvfs-fuse)
# when /dev/fuse works, else in the QEMU guest, where a shell opens (or CMD
# runs).  UP_MODE=host|fuse|vm|cluster forces a way; `make
# down` unmounts and stops it all.  On a fresh machine it first installs the
# Debian packages it needs (scripts/deps, as root); then the sub-make builds
# user space with the cmake that may just have been installed.  scripts/up
# builds the module it loads.
up:
	@[ "$$(id -u)" = 0 ] || [ "$(UP_MODE)" = cluster ] || { echo "up: mounting needs root; run:  sudo make up" \
		"(UP_MODE=cluster starts only the servers, as any user)" >&2; exit 1; }
	@scripts/deps --for "make up$(if $(UP_MODE), UP_MODE=$(UP_MODE))"
	@$(MAKE) --no-print-directory all
	@UP_BUILD=1 BUILD=$(BUILD) KMOD_OUT=$(KMOD_OUT) KBUILD_FLAGS="$(KBUILD_FLAGS)" scripts/up

deps:
	@scripts/deps

down:
	@scripts/down

# The QEMU guest with pvfs.ko loaded: a shell there (or runs CMD).
vm-shell: all kmod-test
	@scripts/vm-shell

lint: all
	@scripts/lint $(BUILD)

format:
	@git ls-files --cached --others --exclude-standard '*.c' '*.cpp' '*.hpp' '*.h' ':!include/pvfs/pvfsd_dev.h' | xargs -r clang-format -i
	@clang-format -i --style=file:kmod/.clang-format include/pvfs/pvfsd_dev.h

# libFuzzer targets, built with clang into build-fuzz/.  `make fuzz` runs
# each for FUZZ_TIME seconds (default 600) on a corpus seeded from
# fuzz/corpus/; make check runs them briefly.
FUZZ_BUILD := $(SRC)/build-fuzz
FUZZ_TIME ?= 600
fuzz-build:
	@[ -f $(FUZZ_BUILD)/build.ninja ] || CC=clang CXX=clang++ cmake -S $(SRC) -B $(FUZZ_BUILD) -G Ninja -DPVFS_FUZZ=ON >/dev/null
	@ninja -C $(FUZZ_BUILD) fuzz-targets

fuzz: fuzz-build
	@scripts/fuzz --time $(FUZZ_TIME)

dkms-install:
	@scripts/dkms-install

# Debian packages (docs/packaging.md) into $(BUILD)/deb/, checked by lintian.
deb:
	@scripts/deb --out $(BUILD)/deb

# Benchmarks: each writes bench/results/<name>/ (data.csv, summary.md,
# summary.json, plots).  QUICK=1 runs the short version used by make check.
bench: bench-net bench-fs bench-kernel bench-ib

bench-net: all
	@bench/net/run $(if $(filter 1,$(QUICK)),--quick) --build $(BUILD)

bench-fs: all
	@bench/fs/run $(if $(filter 1,$(QUICK)),--quick) --build $(BUILD)

# In the QEMU guest rig (KERNEL=6.1 or 6.12), so pvfs.ko is built for every
# installed kernel first.
bench-kernel: all kmod-test
	@bench/kernel/run $(if $(filter 1,$(QUICK)),--quick) --build $(BUILD) --kmod $(KMOD_OUT) \
		--kernel $(or $(KERNEL),6.1)

# BMI's ib method on Soft-RoCE in the QEMU guest, next to perftest and TCP.
bench-ib: all
	@bench/ib/run $(if $(filter 1,$(QUICK)),--quick) --build $(BUILD) --kernel $(or $(KERNEL),6.1)

clean:
	rm -rf $(SRC)/build $(SRC)/build-san $(SRC)/build-fuzz

help:
	@echo "make              build user space into $(BUILD) (SANITIZE=1: ASan+UBSan)"
	@echo "make kmod         build pvfs.ko (KDIR=..., C=1 for sparse)"
	@echo "make check        build everything and run the test suite (kernel 6.1)"
	@echo "make check-full   the same on kernels 6.1 and 6.12"
	@echo "make up           a local cluster (1 metadata + 3 data servers, ./run/) mounted at /mnt/pvfs;"
	@echo "                  through FUSE when this kernel cannot load pvfs.ko, else in a QEMU guest"
	@echo "                  shell (CMD=... runs a command there); UP_MODE=host|fuse|vm|cluster forces a way"
	@echo "make down         unmount it and stop it all"
	@echo "make deps         install the Debian packages pvfs needs (make up and make check do it)"
	@echo "make vm-shell     boot a guest with pvfs.ko loaded (CMD=... to run a command)"
	@echo "make lint         clang-format and clang-tidy over user-space sources"
	@echo "make dkms-install register kmod/ with DKMS for every installed kernel"
	@echo "make deb          Debian packages into $(BUILD)/deb/ (pvfs-dkms, pvfs-client, pvfs-server,"
	@echo "                  pvfs-tools, libpvfs-dev), checked by lintian"
	@echo "make bench-fs     file-system benchmark into bench/results/fs/ (QUICK=1: short run)"
	@echo "make bench-kernel the mount vs the client library vs FUSE in the QEMU guest, into"
	@echo "                  bench/results/kernel/ (QUICK=1: short run; KERNEL=6.12)"
	@echo "make bench-ib     BMI over Soft-RoCE vs perftest and TCP in the QEMU guest, into"
	@echo "                  bench/results/ib/ (QUICK=1: short run; KERNEL=6.12)"
