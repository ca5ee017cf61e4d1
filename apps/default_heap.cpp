// The `apiary` executable's heap under the sanitizers: ASan's allocator, left as it is
// (huge_page_new.cpp holds the tcmalloc policy of the normal build).
#include "apps/commands.hpp"

void apiary::apps::heap_on_huge_pages() {}
