#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
static void nt_copy(uint8_t*d,const uint8_t*s,size_t n){
  size_t i=0;
  while(((uintptr_t)(d+i)&31) && i<n){d[i]=s[i];i++;}
  for(;i+128<=n;i+=128){
    __m256i a=_mm256_loadu_si256((const __m256i*)(s+i));
    __m256i b=_mm256_loadu_si256((const __m256i*)(s+i+32));
    __m256i c=_mm256_loadu_si256((const __m256i*)(s+i+64));
    __m256i e=_mm256_loadu_si256((const __m256i*)(s+i+96));
    _mm256_stream_si256((__m256i*)(d+i),a);_mm256_stream_si256((__m256i*)(d+i+32),b);
    _mm256_stream_si256((__m256i*)(d+i+64),c);_mm256_stream_si256((__m256i*)(d+i+96),e);}
  for(;i+32<=n;i+=32)_mm256_stream_si256((__m256i*)(d+i),_mm256_loadu_si256((const __m256i*)(s+i)));
  for(;i<n;i++)d[i]=s[i];
}
static void movsb(uint8_t*d,const uint8_t*s,size_t n){__asm__ volatile("rep movsb":"+D"(d),"+S"(s),"+c"(n)::"memory");}
int main(int argc,char**argv){
  size_t dg=atoi(argv[1]); size_t ring=(size_t)atoi(argv[2])<<20; int mode=atoi(argv[3]);
  uint8_t*src=aligned_alloc(4096,1<<16); memset(src,1,1<<16);
  uint8_t*dst=aligned_alloc(4096,ring); memset(dst,2,ring);
  size_t per=65536/dg, slot=65536, nslots=ring/slot; long iters=0; double t0=now(); double total=0;
  for(int lap=0;lap<40;lap++) for(size_t s=0;s<nslots;s++){ uint8_t*d=dst+s*slot;
    for(size_t k=0;k<per;k++){ uint8_t*dd=d+k*(dg-64); const uint8_t*ss=src+64+k*dg%60000;
      if(mode==0)memcpy(dd,ss,dg-64); else if(mode==1) nt_copy(dd,ss,dg-64); else movsb(dd,ss,dg-64); iters++;}
    if(mode==1)_mm_sfence();}
  double t=now()-t0; printf("dg=%zu ring=%zuMiB mode=%d %.1f ns/datagram\n",dg,ring>>20,mode,t/iters);
}
