// kmod-probe: small checks against pvfs.ko run inside the VM rig, where a
// shell cannot easily observe errno.
//
//   kmod-probe open PATH EXPECT...
//       Opens PATH once per EXPECT, keeping every earlier descriptor open,
//       and checks each result: "ok" or an errno name (EBUSY, EPERM, ...).
//   kmod-probe mount SOURCE TARGET EXPECT
//       mount(2)s SOURCE on TARGET as type pvfs and checks the result.
//
// Prints one line per step; exits 0 when every result matched, 1 otherwise,
// 2 on bad usage.
#include <pvfs/unique_fd.hpp>

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using pvfs::UniqueFd;

std::string result_name(int rc, int err)
{
    if (rc == 0)
        return "ok";
    const char *name = strerrorname_np(err);
    return name != nullptr ? name : "errno " + std::to_string(err);
}

bool check(std::string_view what, std::string_view expect, int rc, int err)
{
    const std::string got = result_name(rc, err);
    const bool match = got == expect;
    std::printf("%s: %s (%s)%s%.*s\n", std::string(what).c_str(), got.c_str(),
                rc == 0 ? "success" : strerrordesc_np(err), match ? "" : ", expected ",
                match ? 0 : static_cast<int>(expect.size()), expect.data());
    return match;
}

int do_open(std::string_view path, std::span<char *const> expects)
{
    std::vector<UniqueFd> held;
    bool all = true;
    int n = 0;
    for (const char *expect : expects) {
        errno = 0;
        UniqueFd fd(::open(std::string(path).c_str(), O_RDWR | O_CLOEXEC));
        const int err = errno;
        all &= check("open #" + std::to_string(++n) + " " + std::string(path), expect,
                     fd.valid() ? 0 : -1, err);
        if (fd.valid())
            held.push_back(std::move(fd));
    }
    return all ? 0 : 1;
}

int do_mount(const char *source, const char *target, std::string_view expect)
{
    errno = 0;
    const int rc = ::mount(source, target, "pvfs", 0, nullptr);
    const int err = errno;
    const bool match =
        check(std::string("mount ") + source + " " + target, expect, rc == 0 ? 0 : -1, err);
    if (rc == 0)
        ::umount2(target, MNT_DETACH);
    return match ? 0 : 1;
}

void usage()
{
    std::fprintf(stderr, "usage: kmod-probe open PATH EXPECT...\n"
                         "       kmod-probe mount SOURCE TARGET EXPECT\n"
                         "EXPECT is ok or an errno name such as EBUSY\n");
}

} // namespace

int main(int argc, char **argv)
{
    const std::span<char *const> args(argv, static_cast<std::size_t>(argc));
    if (args.size() >= 4 && std::string_view(args[1]) == "open")
        return do_open(args[2], args.subspan(3));
    if (args.size() == 5 && std::string_view(args[1]) == "mount")
        return do_mount(args[2], args[3], args[4]);
    usage();
    return 2;
}
