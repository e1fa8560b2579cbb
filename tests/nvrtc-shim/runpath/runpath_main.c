#include <stdio.h>

int kc_opener_load(void);

int main(void)
{
    int v = kc_opener_load();
    printf("neighbour says %d\n", v);
    return v == 42 ? 0 : 1;
}
