// libpvfs (include/pvfs/client.hpp): the synchronous API, each call its
// coroutine run to completion on the client's loop.
#include "impl.hpp"

namespace pvfs::client {

// ---- the synchronous API ---------------------------------------------------

int Client::lookup(Handle parent, std::string_view name, Attr &out)
{
    return impl_->engine->wait(co_lookup(parent, name, out));
}

int Client::resolve(std::string_view path, Attr &out, bool follow)
{
    return impl_->engine->wait(co_resolve(path, out, follow));
}

int Client::getattr(Handle handle, Attr &out)
{
    return impl_->engine->wait(co_getattr(handle, out));
}

int Client::access(Handle handle, std::uint32_t mask)
{
    return impl_->engine->wait(co_access(handle, mask));
}

int Client::setattr(Handle handle, const SetAttr &change, Attr &out)
{
    return impl_->engine->wait(co_setattr(handle, change, out));
}

int Client::create(Handle parent, std::string_view name, std::uint32_t mode, bool exclusive,
                   const Layout &layout, Attr &out, bool *created)
{
    return impl_->engine->wait(co_create(parent, name, mode, exclusive, layout, out, created));
}

int Client::create_open(Handle parent, std::string_view name, std::uint32_t mode, bool exclusive,
                        const Layout &layout, std::uint32_t open_mode, Attr &out, bool *created)
{
    return impl_->engine->wait(
        co_create_open(parent, name, mode, exclusive, layout, open_mode, 0, out, created));
}

int Client::mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out)
{
    return impl_->engine->wait(co_mkdir(parent, name, mode, out));
}

int Client::mkdir(Handle parent, std::string_view name, std::uint32_t mode, Attr &out,
                  std::uint32_t meta_index)
{
    return impl_->engine->wait(co_mkdir(parent, name, mode, out, meta_index));
}

int Client::mknod(Handle parent, std::string_view name, ObjectType type, std::uint32_t mode,
                  std::uint64_t rdev, Attr &out)
{
    return impl_->engine->wait(co_mknod(parent, name, type, mode, rdev, out));
}

int Client::symlink(Handle parent, std::string_view name, std::string_view target, Attr &out)
{
    return impl_->engine->wait(co_symlink(parent, name, target, out));
}

int Client::readlink(Handle handle, std::string &target)
{
    return impl_->engine->wait(co_readlink(handle, target));
}

int Client::link(Handle handle, Handle new_parent, std::string_view new_name, Attr &out)
{
    return impl_->engine->wait(co_link(handle, new_parent, new_name, out));
}

int Client::unlink(Handle parent, std::string_view name)
{
    return impl_->engine->wait(co_unlink(parent, name));
}

int Client::rmdir(Handle parent, std::string_view name)
{
    return impl_->engine->wait(co_rmdir(parent, name));
}

int Client::rename(Handle old_parent, std::string_view old_name, Handle new_parent,
                   std::string_view new_name, std::uint32_t flags)
{
    return impl_->engine->wait(co_rename(old_parent, old_name, new_parent, new_name, flags));
}

int Client::readdir(Handle dir, std::uint64_t cookie, std::uint32_t max_entries,
                    std::vector<DirEntry> &entries, bool &eof)
{
    return impl_->engine->wait(co_readdir(dir, cookie, max_entries, entries, eof));
}

std::int64_t Client::read(Handle handle, std::uint64_t offset, std::span<std::byte> buffer)
{
    return impl_->engine->wait(co_read(handle, offset, buffer));
}

std::int64_t Client::write(Handle handle, std::uint64_t offset, std::span<const std::byte> data)
{
    return impl_->engine->wait(co_write(handle, offset, data));
}

std::int64_t Client::read_list(Handle handle, std::span<const Region> regions,
                               std::span<std::byte> memory)
{
    return impl_->engine->wait(co_read_list(handle, regions, memory));
}

std::int64_t Client::write_list(Handle handle, std::span<const Region> regions,
                                std::span<const std::byte> memory)
{
    return impl_->engine->wait(co_write_list(handle, regions, memory));
}

int Client::fsync(Handle handle, bool by_open)
{
    return impl_->engine->wait(co_fsync(handle, by_open));
}

int Client::statfs(StatFs &out)
{
    return impl_->engine->wait(co_statfs(out));
}

int Client::xattr_get(Handle handle, std::string_view name, std::vector<std::byte> &value)
{
    return impl_->engine->wait(co_xattr_get(handle, name, value));
}

int Client::xattr_set(Handle handle, std::string_view name, std::span<const std::byte> value,
                      std::uint32_t flags)
{
    return impl_->engine->wait(co_xattr_set(handle, name, value, flags));
}

int Client::xattr_list(Handle handle, std::vector<std::string> &names)
{
    return impl_->engine->wait(co_xattr_list(handle, names));
}

int Client::xattr_remove(Handle handle, std::string_view name)
{
    return impl_->engine->wait(co_xattr_remove(handle, name));
}

int Client::layout_get(Handle handle, Layout &out)
{
    return impl_->engine->wait(co_layout_get(handle, out));
}

int Client::layout_set(Handle handle, const Layout &layout)
{
    return impl_->engine->wait(co_layout_set(handle, layout));
}

int Client::list_handles(std::uint32_t meta_index, std::uint64_t cookie, std::uint32_t max,
                         HandlePage &out)
{
    return impl_->engine->wait(co_list_handles(meta_index, cookie, max, out));
}

int Client::list_objects(std::uint32_t data_index, std::uint64_t cookie, std::uint32_t max,
                         HandlePage &out)
{
    return impl_->engine->wait(co_list_objects(data_index, cookie, max, out));
}

int Client::remove_orphan_dir(Handle handle)
{
    return impl_->engine->wait(co_remove_orphan_dir(handle));
}

int Client::remove_object(std::uint32_t data_index, Handle handle)
{
    return impl_->engine->wait(co_remove_object(data_index, handle));
}

std::vector<ServerStatus> Client::status_all(bool counters)
{
    return impl_->engine->wait(co_status_all(counters));
}

} // namespace pvfs::client
