// The TCP method of BMI: its only door is the factory.
#ifndef PVFS_LIBNET_TCP_TCP_HPP
#define PVFS_LIBNET_TCP_TCP_HPP

#include "../../core/core.hpp"

#include <memory>
#include <string_view>

namespace bmi::tcp {

// engine: "epoll", "uring", "auto" or "" (see Options::tcp_engine).
std::unique_ptr<Method> make_method(Core &core, std::string_view engine);

} // namespace bmi::tcp

#endif // PVFS_LIBNET_TCP_TCP_HPP
