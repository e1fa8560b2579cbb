// Included by nothing: editing it must not invalidate main.cu's entries.
#pragma once
#define UNRELATED 1
