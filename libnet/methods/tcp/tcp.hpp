// The TCP method of BMI: its only door is the factory.
#ifndef PVFS_LIBNET_TCP_TCP_HPP
#define PVFS_LIBNET_TCP_TCP_HPP

#include "../../core/core.hpp"

#include <memory>

namespace bmi::tcp {

std::unique_ptr<Method> make_method(Core &core);

} // namespace bmi::tcp

#endif // PVFS_LIBNET_TCP_TCP_HPP
