// Metrics and their Prometheus text (pvfs/metrics.hpp).
#include "pvfs/metrics.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "pvfs/gossip.hpp"
#include "pvfs/unique_fd.hpp"

namespace pvfs::metrics {

namespace {

bool name_char(char c, bool first, bool colon) noexcept
{
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    return letter || (colon && c == ':') || (!first && digit);
}

const char *type_text(Type type) noexcept
{
    switch (type) {
    case Type::counter:
        return "counter";
    case Type::gauge:
        return "gauge";
    case Type::histogram:
        break;
    }
    return "histogram";
}

// {a="x",b="y"} with `extra` (already a complete name="value") appended;
// nothing for no labels.
void append_labels(std::string &out, const Labels &labels, std::string_view extra = {})
{
    if (labels.empty() && extra.empty())
        return;
    out += '{';
    bool first = true;
    for (const auto &[name, value] : labels) {
        if (!first)
            out += ',';
        first = false;
        out += name;
        out += "=\"";
        out += escape_label_value(value);
        out += '"';
    }
    if (!extra.empty()) {
        if (!first)
            out += ',';
        out += extra;
    }
    out += '}';
}

// Exact decimal seconds of a count of `units` of 10^-digits s.
std::string decimal_seconds(std::uint64_t units, std::uint64_t per_second, int digits)
{
    return fmt::format("{}.{:0{}}", units / per_second, units % per_second, digits);
}

} // namespace

Histogram::Snapshot Histogram::snapshot() const noexcept
{
    Snapshot s;
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
        s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
        s.count += s.buckets[i];
    }
    s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
    return s;
}

bool valid_metric_name(std::string_view name) noexcept
{
    if (name.empty())
        return false;
    for (std::size_t i = 0; i < name.size(); ++i) {
        if (!name_char(name[i], i == 0, true))
            return false;
    }
    return true;
}

bool valid_label_name(std::string_view name) noexcept
{
    if (name.empty() || name.starts_with("__"))
        return false;
    for (std::size_t i = 0; i < name.size(); ++i) {
        if (!name_char(name[i], i == 0, false))
            return false;
    }
    return true;
}

std::string escape_label_value(std::string_view text)
{
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string escape_help(std::string_view text)
{
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

Registry::Series &Registry::series(std::string_view name, std::string_view help, Type type,
                                   Labels labels)
{
    if (!valid_metric_name(name))
        throw std::invalid_argument(fmt::format("metric name '{}' is not valid", name));
    for (std::size_t i = 0; i < labels.size(); ++i) {
        const std::string &label = labels[i].first;
        if (!valid_label_name(label) || (type == Type::histogram && label == "le"))
            throw std::invalid_argument(
                fmt::format("{}: label name '{}' is not valid", name, label));
        for (std::size_t j = 0; j < i; ++j) {
            if (labels[j].first == label)
                throw std::invalid_argument(fmt::format("{}: label '{}' twice", name, label));
        }
    }
    // Caller holds mutex_.
    auto it = families_.find(name);
    if (it == families_.end()) {
        it = families_.emplace(std::string(name), Family{std::string(help), type, {}}).first;
    } else if (it->second.type != type || it->second.help != help) {
        throw std::invalid_argument(
            fmt::format("metric '{}' registered again with another type or help", name));
    }
    Family &family = it->second;
    for (const std::unique_ptr<Series> &s : family.series) {
        if (s->labels == labels)
            return *s;
    }
    family.series.push_back(std::make_unique<Series>());
    Series &s = *family.series.back();
    s.labels = std::move(labels);
    return s;
}

Counter &Registry::counter(std::string_view name, std::string_view help, Labels labels)
{
    const std::lock_guard lock(mutex_);
    Series &s = series(name, help, Type::counter, std::move(labels));
    if (s.read_counter)
        throw std::invalid_argument(fmt::format("counter '{}' is read by a function", name));
    if (!s.counter)
        s.counter = std::make_unique<Counter>();
    return *s.counter;
}

Gauge &Registry::gauge(std::string_view name, std::string_view help, Labels labels)
{
    const std::lock_guard lock(mutex_);
    Series &s = series(name, help, Type::gauge, std::move(labels));
    if (s.read_gauge)
        throw std::invalid_argument(fmt::format("gauge '{}' is read by a function", name));
    if (!s.gauge)
        s.gauge = std::make_unique<Gauge>();
    return *s.gauge;
}

Histogram &Registry::histogram(std::string_view name, std::string_view help, Labels labels)
{
    const std::lock_guard lock(mutex_);
    Series &s = series(name, help, Type::histogram, std::move(labels));
    if (!s.histogram)
        s.histogram = std::make_unique<Histogram>();
    return *s.histogram;
}

void Registry::counter_fn(std::string_view name, std::string_view help, Labels labels,
                          std::function<std::uint64_t()> read)
{
    const std::lock_guard lock(mutex_);
    Series &s = series(name, help, Type::counter, std::move(labels));
    if (s.counter)
        throw std::invalid_argument(fmt::format("counter '{}' is already a value", name));
    s.read_counter = std::move(read);
}

void Registry::gauge_fn(std::string_view name, std::string_view help, Labels labels,
                        std::function<std::int64_t()> read)
{
    const std::lock_guard lock(mutex_);
    Series &s = series(name, help, Type::gauge, std::move(labels));
    if (s.gauge)
        throw std::invalid_argument(fmt::format("gauge '{}' is already a value", name));
    s.read_gauge = std::move(read);
}

std::string Registry::render() const
{
    const std::lock_guard lock(mutex_);
    std::string out;
    for (const auto &[name, family] : families_) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(family.help), name,
                           type_text(family.type));
        for (const std::unique_ptr<Series> &s : family.series) {
            if (family.type == Type::histogram) {
                const Histogram::Snapshot snap = s->histogram->snapshot();
                std::uint64_t cumulative = 0;
                for (std::size_t i = 0; i < Histogram::finite_buckets; ++i) {
                    cumulative += snap.buckets[i];
                    out += name;
                    out += "_bucket";
                    append_labels(out, s->labels,
                                  fmt::format("le=\"{}\"", decimal_seconds(Histogram::bound_us(i),
                                                                           1'000'000, 6)));
                    out += fmt::format(" {}\n", cumulative);
                }
                out += name;
                out += "_bucket";
                append_labels(out, s->labels, "le=\"+Inf\"");
                out += fmt::format(" {}\n", snap.count);
                out += name;
                out += "_sum";
                append_labels(out, s->labels);
                out += fmt::format(" {}\n", decimal_seconds(snap.sum_ns, 1'000'000'000, 9));
                out += name;
                out += "_count";
                append_labels(out, s->labels);
                out += fmt::format(" {}\n", snap.count);
                continue;
            }
            out += name;
            append_labels(out, s->labels);
            if (s->counter)
                out += fmt::format(" {}\n", s->counter->value());
            else if (s->read_counter)
                out += fmt::format(" {}\n", s->read_counter());
            else if (s->gauge)
                out += fmt::format(" {}\n", s->gauge->value());
            else if (s->read_gauge)
                out += fmt::format(" {}\n", s->read_gauge());
            else
                out += " 0\n";
        }
    }
    return out;
}

int write_file_atomically(const std::string &path, std::string_view text, std::string &error)
{
    // The temporary file gets a fresh random name, created exclusively in
    // the file's directory (opened once, so a directory renamed meanwhile
    // cannot redirect the rename): in a directory others may write, a name
    // they created first (a file, a FIFO, a link to their file) makes the
    // create fail and another name is tried, instead of the write going
    // into their file or the event loop blocking on their FIFO.
    const auto slash = path.rfind('/');
    std::string dir = ".";
    std::string base = path;
    if (slash != std::string::npos) {
        dir = slash == 0 ? std::string("/") : path.substr(0, slash);
        base = path.substr(slash + 1);
    }
    std::string tmp;      // the temporary's path, for messages
    std::string tmp_name; // set once this call created it
    UniqueFd dfd;
    UniqueFd fd;
    const auto fail = [&](const std::string &what) {
        const int e = errno;
        error = fmt::format("{}: {}", what, std::generic_category().message(e));
        if (!tmp_name.empty() && dfd.valid())
            static_cast<void>(::unlinkat(dfd.get(), tmp_name.c_str(), 0));
        return e;
    };
    dfd = UniqueFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dfd.valid())
        return fail(path);
    for (int attempt = 0; attempt < 16 && !fd.valid(); ++attempt) {
        std::array<unsigned char, 8> rnd{};
        if (::getrandom(rnd.data(), rnd.size(), 0) != static_cast<ssize_t>(rnd.size()))
            return fail(path);
        std::string hex;
        for (const unsigned char b : rnd)
            hex += fmt::format("{:02x}", b);
        const std::string name = fmt::format(".{}.{}.tmp", base, hex);
        tmp = fmt::format("{}/{}", dir, name);
        fd = UniqueFd(::openat(dfd.get(), name.c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                               0644));
        if (fd.valid())
            tmp_name = name;
        else if (errno != EEXIST)
            return fail(tmp);
    }
    if (!fd.valid())
        return fail(tmp); // EEXIST every time
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return fail(tmp);
        }
        done += static_cast<std::size_t>(n);
    }
    // close(2) may report what write(2) did not (on NFS, for one).
    if (::close(fd.release()) != 0)
        return fail(tmp);
    if (::renameat(dfd.get(), tmp_name.c_str(), dfd.get(), base.c_str()) != 0)
        return fail(path);
    error.clear();
    return 0;
}

std::uint64_t monotonic_ns() noexcept
{
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000U +
           static_cast<std::uint64_t>(ts.tv_nsec) + 1;
}

namespace {

constexpr const char *requests_help =
    "Requests answered, by op (counted when the answer is sent, errors included).";
constexpr const char *errors_help =
    "Requests answered with an error, by op and errno (E2BIG..., or a number).";
constexpr const char *latency_help =
    "Seconds from a request's arrival to the send of its answer, by op.";

Labels with_op(Labels labels, std::string_view op)
{
    labels.emplace_back("op", std::string(op));
    return labels;
}

std::string errno_label(std::size_t error)
{
    if (const char *name = ::strerrorname_np(static_cast<int>(error)))
        return name;
    return std::to_string(error);
}

} // namespace

OpSeries::OpSeries(Registry &registry, std::string_view prefix, Labels labels, std::string_view op)
    : registry_(registry), errors_name_(std::string(prefix) + "_errors_total"),
      labels_(with_op(std::move(labels), op)),
      requests_(registry.counter(std::string(prefix) + "_requests_total", requests_help, labels_)),
      latency_(registry.histogram(std::string(prefix) + "_request_duration_seconds", latency_help,
                                  labels_))
{
}

void OpSeries::answered(std::uint64_t ns, int error)
{
    latency_.observe_ns(ns);
    requests_.add();
    if (error == 0)
        return;
    const std::size_t e = error > 0 && static_cast<std::size_t>(error) < max_errno
                              ? static_cast<std::size_t>(error)
                              : max_errno;
    if (errors_[e] == nullptr) {
        Labels l = labels_;
        l.emplace_back("errno", e == max_errno ? std::string("other") : errno_label(e));
        errors_[e] = &registry_.counter(errors_name_, errors_help, std::move(l));
    }
    errors_[e]->add();
}

std::uint64_t OpSeries::errors() const noexcept
{
    std::uint64_t n = 0;
    for (const Counter *c : errors_) {
        if (c != nullptr)
            n += c->value();
    }
    return n;
}

MetricsFile::MetricsFile(const Registry &registry, std::string path,
                         std::chrono::milliseconds interval)
    : registry_(registry), path_(std::move(path)), interval_(interval)
{
}

MetricsFile::~MetricsFile()
{
    if (written_)
        static_cast<void>(::unlink(path_.c_str()));
}

int MetricsFile::write(std::string &error)
{
    if (path_.empty())
        return 0;
    const int rc = write_file_atomically(path_, registry_.render(), error);
    written_ = written_ || rc == 0;
    return rc;
}

void MetricsFile::tick(std::chrono::steady_clock::time_point now)
{
    if (path_.empty() || now < next_write_)
        return;
    next_write_ = now + interval_;
    std::string error;
    if (write(error) != 0) {
        if (!failing_)
            gossip::error(gossip::Mask::none, "metrics file not written (tried every {} ms): {}",
                          interval_.count(), error);
        failing_ = true;
        return;
    }
    if (failing_)
        gossip::warning(gossip::Mask::none, "metrics file {} written again", path_);
    failing_ = false;
}

} // namespace pvfs::metrics
