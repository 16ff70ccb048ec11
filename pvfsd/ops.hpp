// pvfsd's private interface between Handler and the coroutines that perform
// each upcall's op (ops_namespace.cpp, ops_data.cpp).  Handler::dispatch
// finds them in a table indexed by PVFSD_OP_*.
#pragma once

#include "open_table.hpp"
#include "upcall.hpp"

#include <pvfs/client.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace pvfs::pvfsd::ops {

// The data slots the kernel shares with pvfsd, `size` bytes each.
struct Slots {
    std::span<std::byte> area;
    std::size_t size = 0;

    // The first `length` bytes of slot `index`; empty when they are not
    // all inside the area (the kernel's numbers are not trusted).
    [[nodiscard]] std::span<std::byte> at(std::uint32_t index, std::uint32_t length) const;
};

// What an op works with.  Each op takes it by value: the op's frame keeps
// the references, whose objects (the upcall, the mount's client, the
// downcall being built) Handler::run holds until the op has ended.
struct Call {
    const Upcall &up;
    client::Client &c;
    Downcall &out;
    Slots slots;
};

// An op's coroutine: 0 (its answer put in call.out) or a negative errno.
using Fn = Task<int> (*)(Call call);

// Names, links, directories and attributes (ops_namespace.cpp).
Task<int> lookup(Call call);
Task<int> remove(Call call); // UNLINK and RMDIR
Task<int> getattr(Call call);
Task<int> setattr(Call call);
Task<int> make_node(Call call); // MKDIR and MKNOD
Task<int> symlink(Call call);
Task<int> link(Call call);
Task<int> rename(Call call);
Task<int> readlink(Call call);
Task<int> readdir(Call call);

// File data, the file system's totals and extended attributes (ops_data.cpp).
Task<int> io(Call call); // READ and WRITE
Task<int> fsync(Call call);
Task<int> statfs(Call call);
Task<int> xattr_get(Call call);
Task<int> xattr_set(Call call);
Task<int> xattr_list(Call call);
Task<int> xattr_remove(Call call);

// The mount's open files (ops_open.cpp): Handler::run gives them the
// mount's table.
Task<int> open(Call call, OpenTable &table);
// A CREATE that may open too; create_open: the channel agreed on
// PVFSD_FEAT_CREATE_OPEN (else an open_mode is the kernel's error).
Task<int> create(Call call, OpenTable &table, bool create_open);
Task<int> close(Call call, OpenTable &table); // answers 0: nothing waits

} // namespace pvfs::pvfsd::ops
