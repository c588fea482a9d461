// The same copy with no time to spare: 4,000 datagrams are queued in the socket, the caches are
// flushed by writing 128 MiB, and the receiver drains the socket into the next places of a 64 MiB
// ring, timing each recv() together with what the mode does first to the place:
//   cold       nothing
//   read       load one byte of each of its lines
//   prefetchw  prefetchw each of its lines
// usage: drain MODE [datagram bytes=8972]   (needs net.core.rmem_max >= 120 MiB)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <x86intrin.h>
static uint64_t ns(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
int main(int argc,char**argv){int DG=argc>2?atoi(argv[2]):8972; const char*mode=argv[1]; int port=47200;
 size_t RING=64ul<<20; char*ring=mmap(0,RING,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE,-1,0); memset(ring,1,RING);
 char*evict=malloc(128<<20); memset(evict,2,128<<20);
 int fd=socket(AF_INET,SOCK_DGRAM,0); int sz=120<<20; setsockopt(fd,SOL_SOCKET,SO_RCVBUF,&sz,sizeof sz);
 struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port)};a.sin_addr.s_addr=htonl(0x7f000001); bind(fd,(void*)&a,sizeof a);
 int s=socket(AF_INET,SOCK_DGRAM,0); char*b=calloc(1,DG); size_t stride=(DG+63)&~63ul, slots=RING/stride, k=0;
 uint64_t tot=0,n=0,touch=0;
 for(int round=0;round<20;round++){ long sent=0; for(int i=0;i<4000;i++){ if(sendto(s,b,DG,0,(void*)&a,sizeof a)==DG)sent++;}
  memset(evict,round,128<<20);
  for(;;){char*dst=ring+(k%slots)*stride; uint64_t t=ns();
   if(!strcmp(mode,"read")){for(long l=0;l<DG;l+=64)(void)*(volatile char*)(dst+l);}
   if(!strcmp(mode,"prefetchw")){for(long l=0;l<DG;l+=64)_m_prefetchw(dst+l);}
   uint64_t m=ns(); ssize_t r=recv(fd,dst,DG,MSG_DONTWAIT); uint64_t e=ns(); if(r<0)break; tot+=e-t; touch+=m-t; n++; k++;}
 }
 printf("%s %d B: %.0f ns/datagram total (touch %.0f), %lu datagrams\n",mode,DG,(double)tot/n,(double)touch/n,n); return 0;}
