# proto_fuzz: arbitrary bytes decoded as pvfs requests and responses, and
# as the body of a correctly signed envelope (lib/proto).
add_executable(proto_fuzz ${CMAKE_CURRENT_LIST_DIR}/proto_fuzz.cpp)
target_compile_options(proto_fuzz PRIVATE -fsanitize=fuzzer)
target_link_options(proto_fuzz PRIVATE -fsanitize=fuzzer)
target_link_libraries(proto_fuzz PRIVATE pvfs_proto)
