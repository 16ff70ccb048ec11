// The InfiniBand / RoCE method of BMI ("ib://host:port"), over libibverbs
// and librdmacm: its only door is the factory.
#ifndef PVFS_LIBNET_IB_IB_HPP
#define PVFS_LIBNET_IB_IB_HPP

#include "../../core/core.hpp"

#include <memory>

namespace bmi::ib {

// Opens nothing until the first ib address is used: a process without
// RDMA devices (or without the rdma_cm module) pays nothing, and gets a
// clear error only when it asks for ib.
std::unique_ptr<Method> make_method(Core &core);

} // namespace bmi::ib

#endif // PVFS_LIBNET_IB_IB_HPP
