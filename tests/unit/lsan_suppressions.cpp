// Linked into ATF test programs in sanitizer builds: libatf-c leaks its
// test-case metadata on purpose (the process exits right after), which
// LeakSanitizer would report as a failure of every test program.
extern "C" const char *
__lsan_default_suppressions(); // NOLINT(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)

extern "C" const char *
__lsan_default_suppressions() // NOLINT(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)
{
    return "leak:libatf-c.so\n";
}

// Kyua treats any output while listing test cases as a broken program.
extern "C" const char *
__lsan_default_options(); // NOLINT(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)

extern "C" const char *
__lsan_default_options() // NOLINT(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)
{
    return "print_suppressions=0";
}
