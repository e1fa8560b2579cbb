// Found beside main.cu (a "quoted" include).
#pragma once
#define BLEND_WEIGHT 0.25f
