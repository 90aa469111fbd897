/* The public API test program compiled as C++: the header must work there unchanged. */
#include "public_api.c"
