# config_fuzz: arbitrary bytes parsed as a cluster config (lib/config).
add_executable(config_fuzz ${CMAKE_CURRENT_LIST_DIR}/config_fuzz.cpp)
target_compile_options(config_fuzz PRIVATE -fsanitize=fuzzer)
target_link_options(config_fuzz PRIVATE -fsanitize=fuzzer)
target_link_libraries(config_fuzz PRIVATE pvfs_config)
