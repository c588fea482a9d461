// The kernel's copy of a datagram into memory not in the receiving core's cache, against memory that is.
// A sender thread paces datagrams over loopback; the receiver polls with MSG_DONTWAIT and times each
// recv() that returns one, its destination chosen by the mode:
//   cold      the next place of a 64 MiB ring (not in the cache once the ring has gone round)
//   warm      the same buffer every time (in the cache)
//   read      as cold, the next place's lines loaded (one byte each) while waiting for the datagram
//   pf0       as cold, prefetcht0 of the next place's lines while waiting
//   pretouch  as cold, prefetchw of the next place's lines while waiting
//   write     as cold, one byte of each line stored while waiting
//   huge      as cold, the ring backed by 2 MiB transparent huge pages (madvise)
// usage: paced MODE [Gb/s=10] [datagram bytes=8972] [receiver cpu=0] [sender cpu=1] [port=47123]
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <sched.h>
#include <pthread.h>
#include <unistd.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <x86intrin.h>
static uint64_t ns(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
static int DG=8972; static double GBPS=10; static long COUNT=200000; static int port=47123; static int scpu=1;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static void *sender(void*a){pin(scpu);int fd=socket(AF_INET,SOCK_DGRAM,0);struct sockaddr_in d={.sin_family=AF_INET,.sin_port=htons(port)};d.sin_addr.s_addr=htonl(0x7f000001);
 char *b=calloc(1,DG);double gap=DG*8.0/GBPS; uint64_t t0=ns()+200000000ull;
 for(long i=0;i<COUNT+1000;i++){uint64_t due=t0+(uint64_t)(i*gap);while(ns()<due);memcpy(b,&i,8);sendto(fd,b,DG,0,(void*)&d,sizeof d);} return 0;}
int main(int argc,char**argv){const char*mode=argc>1?argv[1]:"cold"; if(argc>2)GBPS=atof(argv[2]); if(argc>3)DG=atoi(argv[3]); int rcpu=argc>4?atoi(argv[4]):0; scpu=argc>5?atoi(argv[5]):1; if(argc>6)port=atoi(argv[6]);
 pin(rcpu); size_t RING=64ul<<20; int huge=strcmp(mode,"huge")==0; size_t H=2ul<<20;
 char*raw=mmap(0,RING+H,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); char*ring=(char*)(((uintptr_t)raw+H-1)&~(H-1));
 if(huge&&madvise(ring,RING,MADV_HUGEPAGE)){perror("madvise");return 1;} memset(ring,1,RING);
 if(huge){FILE*f=fopen("/proc/self/smaps_rollup","r");char l[256];while(f&&fgets(l,sizeof l,f))if(!strncmp(l,"AnonHugePages",13))fputs(l,stderr);if(f)fclose(f);}
 int fd=socket(AF_INET,SOCK_DGRAM,0); int sz=64<<20; setsockopt(fd,SOL_SOCKET,SO_RCVBUF,&sz,sizeof sz);
 struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port)};a.sin_addr.s_addr=htonl(0x7f000001); if(bind(fd,(void*)&a,sizeof a)){perror("bind");return 1;}
 pthread_t th;pthread_create(&th,0,sender,0);
 int cold=strcmp(mode,"warm")!=0, pre=strcmp(mode,"pretouch")==0, rd=strcmp(mode,"read")==0, wr=strcmp(mode,"write")==0; size_t stride=(DG+63)&~63ul; size_t slots=RING/stride; size_t k=0;
 uint64_t in=0,n=0,spin=0; long got=0; uint64_t start=0;
 if(pre){for(long l=0;l<DG;l+=64)_m_prefetchw(ring+l);}
 while(got<COUNT){char*dst=ring+(cold?(k%slots)*stride:0); uint64_t t=ns(); ssize_t r=recv(fd,dst,DG,MSG_DONTWAIT); uint64_t e=ns();
  if(r<0){spin++;continue;} if(!start)start=t; got++; if(got>1000){in+=e-t;n++;} k++;
  char*nx=ring+(cold?(k%slots)*stride:0); if(pre){for(long l=0;l<DG;l+=64)_m_prefetchw(nx+l);} if(!strcmp(mode,"pf0")){for(long l=0;l<DG;l+=64)_mm_prefetch(nx+l,_MM_HINT_T0);} if(rd){for(long l=0;l<DG;l+=64)(void)*(volatile char*)(nx+l);} if(wr){for(long l=0;l<DG;l+=64)*(volatile char*)(nx+l)=0;} }
 printf("%s %.1f Gb/s %d B: recv %.0f ns/datagram (%.2f GB/s), empty polls %lu\n",mode,GBPS,DG,(double)in/n,(double)DG*n/in,spin);
 return 0;}
