// The receive floor of this host's loopback, for the wire-to-result runs:
// one thread sends 3,000 datagrams of 8,240 bytes (an 8 KiB frame and its
// native header) at 1,000 a second to 127.0.0.1:5799; another busy-polls
// recvmsg(MSG_DONTWAIT) on a socket with SO_TIMESTAMPNS and records, per
// datagram, the clock after the call minus the kernel's receive timestamp.
// That is what any receiver pays between `last_rx_ns` and its first look at
// the datagram; frameloop's `assembly` segment for a one-datagram frame is
// the same span plus its own work. Prints p50/p90/p99 in microseconds.
//
//   gcc -O2 -o rx_floor bench/streaming/rx_floor.c -lpthread
//   ./rx_floor          # plain socket
//   ./rx_floor gro      # with UDP_GRO, as frameloop's receiver sets it
//
// RX_FLOOR_PORT sets the port; with RX_FLOOR_EXTERNAL set the program does
// not send itself and waits for 3,000 datagrams from another sender
// (bench/streaming/receive_latency.sh uses `frameloop send`).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <linux/net_tstamp.h>
#include <netinet/udp.h>
static long long now(){struct timespec t;clock_gettime(CLOCK_REALTIME,&t);return t.tv_sec*1000000000LL+t.tv_nsec;}
static int cmp(const void*a,const void*b){long long x=*(long long*)a,y=*(long long*)b;return x<y?-1:x>y;}
int port=5799; volatile int done=0; int external=0;
void* snd(void*_){int s=socket(AF_INET,SOCK_DGRAM,0);struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port)};a.sin_addr.s_addr=htonl(0x7f000001);
 connect(s,(void*)&a,sizeof a);char buf[8240];memset(buf,1,sizeof buf);usleep(100000);
 for(int i=0;i<3000;i++){long long t=now();while(now()<t+1000000);send(s,buf,sizeof buf,0);} done=1;return 0;}
int main(int argc,char**argv){int gro=argc>1;if(getenv("RX_FLOOR_PORT"))port=atoi(getenv("RX_FLOOR_PORT"));external=getenv("RX_FLOOR_EXTERNAL")!=0;int s=socket(AF_INET,SOCK_DGRAM,0);int one=1;setsockopt(s,SOL_SOCKET,SO_TIMESTAMPNS,&one,4);
 if(gro)setsockopt(s,IPPROTO_UDP,UDP_GRO,&one,4);
 struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port)};a.sin_addr.s_addr=htonl(0x7f000001);bind(s,(void*)&a,sizeof a);
 pthread_t t;if(!external)pthread_create(&t,0,snd,0);static long long d[4000];int n=0;char buf[65536];char cbuf[256];
 while(external?n<3000:(!done||n<3000)){struct iovec iov={buf,sizeof buf};struct msghdr m={0};m.msg_iov=&iov;m.msg_iovlen=1;m.msg_control=cbuf;m.msg_controllen=sizeof cbuf;
  int r=recvmsg(s,&m,MSG_DONTWAIT);if(r<=0){if(done)break;continue;}long long t2=now();
  for(struct cmsghdr*c=CMSG_FIRSTHDR(&m);c;c=CMSG_NXTHDR(&m,c)) if(c->cmsg_level==SOL_SOCKET&&c->cmsg_type==SO_TIMESTAMPNS){struct timespec ts;memcpy(&ts,CMSG_DATA(c),sizeof ts);if(n<4000)d[n++]=t2-(ts.tv_sec*1000000000LL+ts.tv_nsec);}}
 qsort(d,n,8,cmp);printf("gro=%d n=%d p50=%.1f p90=%.1f p99=%.1f us\n",gro,n,d[n/2]/1e3,d[n*9/10]/1e3,d[n*99/100]/1e3);}
