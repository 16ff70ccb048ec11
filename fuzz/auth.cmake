# auth_fuzz: pvfs's connection handshake (lib/proto/auth.cpp): its decoders,
# the server's steps on arbitrary bytes, and tampering with a real
# handshake's messages.
add_executable(auth_fuzz ${CMAKE_CURRENT_LIST_DIR}/auth_fuzz.cpp)
target_compile_options(auth_fuzz PRIVATE -fsanitize=fuzzer)
target_link_options(auth_fuzz PRIVATE -fsanitize=fuzzer)
target_link_libraries(auth_fuzz PRIVATE pvfs_proto)
