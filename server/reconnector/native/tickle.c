/*
 * tickle: makes a TCP client re-send its current ACK at once, so that the connection's
 * next segment is routed anew (the reconnector, server/reconnector/connection-ends.ts).
 *
 *   tickle DEVICE MAC SERVER_IP SERVER_PORT CLIENT_IP CLIENT_PORT
 *
 * Sends two bare ACK segments from SERVER_IP:SERVER_PORT to CLIENT_IP:CLIENT_PORT, with
 * sequence numbers 0 and 2^31 and acknowledgement 0, as an Ethernet frame to MAC on
 * DEVICE (an AF_PACKET socket: the frame skips this host's IP stack and its conntrack,
 * so it creates no entry that the client's answer would then follow). At most one of the
 * two can fall inside the client's receive window, so the client sees at least one out
 * of window and answers it with an ACK carrying its real sequence numbers (RFC 793; Linux
 * rate-limits that answer to one per 500 ms per socket, tcp_invalid_ratelimit). That
 * answer passes kube-proxy afresh: once the stale conntrack entry is deleted it is
 * translated to the share's replacement, whose kernel knows no such connection and
 * resets it, and the client reconnects. The technique is CTDB's "tickle ACK".
 *
 * Needs CAP_NET_RAW. IPv4 only. Exit 0 when both frames were sent, 2 on bad arguments,
 * 1 when the socket or a send failed (the message names the device and the call).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint16_t checksum(const void *data, size_t len, uint32_t sum) {
  const uint8_t *p = data;
  for (size_t i = 0; i + 1 < len; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  if (len & 1) sum += (uint32_t)(p[len - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return (uint16_t)~sum;
}

static int port_arg(const char *s, uint16_t *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 1 || v > 65535) return -1;
  *out = (uint16_t)v;
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: tickle DEVICE MAC SERVER_IP SERVER_PORT CLIENT_IP CLIENT_PORT\n");
    return 2;
  }
  const char *device = argv[1];
  unsigned mac[6];
  struct in_addr server, client;
  uint16_t sport, cport;
  if (sscanf(argv[2], "%2x:%2x:%2x:%2x:%2x:%2x", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5]) != 6) {
    fprintf(stderr, "tickle: MAC %s: must be six hex bytes separated by ':'\n", argv[2]);
    return 2;
  }
  if (inet_pton(AF_INET, argv[3], &server) != 1 || inet_pton(AF_INET, argv[5], &client) != 1) {
    fprintf(stderr, "tickle: %s and %s must be IPv4 addresses\n", argv[3], argv[5]);
    return 2;
  }
  if (port_arg(argv[4], &sport) != 0 || port_arg(argv[6], &cport) != 0) {
    fprintf(stderr, "tickle: ports %s and %s must be 1 to 65535\n", argv[4], argv[6]);
    return 2;
  }
  unsigned index = if_nametoindex(device);
  if (index == 0) {
    fprintf(stderr, "tickle: device %s: %s\n", device, strerror(errno));
    return 1;
  }
  int fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));
  if (fd < 0) {
    fprintf(stderr, "tickle: socket(AF_PACKET) for %s: %s\n", device, strerror(errno));
    return 1;
  }
  struct sockaddr_ll to = {0};
  to.sll_family = AF_PACKET;
  to.sll_protocol = htons(ETH_P_IP);
  to.sll_ifindex = (int)index;
  to.sll_halen = 6;
  for (int i = 0; i < 6; i++) to.sll_addr[i] = (unsigned char)mac[i];

  const uint32_t seqs[2] = {0, 0x80000000u};
  for (int n = 0; n < 2; n++) {
    uint8_t packet[40] = {0};
    uint8_t *ip = packet, *tcp = packet + 20;
    ip[0] = 0x45;                 /* IPv4, 20-byte header */
    ip[3] = sizeof packet;        /* total length */
    ip[6] = 0x40;                 /* don't fragment */
    ip[8] = 64;                   /* TTL */
    ip[9] = IPPROTO_TCP;
    memcpy(ip + 12, &server, 4);
    memcpy(ip + 16, &client, 4);
    uint16_t sum = checksum(ip, 20, 0);
    ip[10] = (uint8_t)(sum >> 8);
    ip[11] = (uint8_t)sum;
    tcp[0] = (uint8_t)(sport >> 8);
    tcp[1] = (uint8_t)sport;
    tcp[2] = (uint8_t)(cport >> 8);
    tcp[3] = (uint8_t)cport;
    tcp[4] = (uint8_t)(seqs[n] >> 24); /* sequence number; acknowledgement stays 0 */
    tcp[5] = (uint8_t)(seqs[n] >> 16);
    tcp[6] = (uint8_t)(seqs[n] >> 8);
    tcp[7] = (uint8_t)seqs[n];
    tcp[12] = 5 << 4; /* 20-byte header */
    tcp[13] = 0x10;   /* ACK */
    tcp[14] = 0x04;   /* window 1024 */
    /* Checksum over the pseudo-header (addresses, protocol, length) and the segment. */
    uint8_t pseudo[12];
    memcpy(pseudo, &server, 4);
    memcpy(pseudo + 4, &client, 4);
    pseudo[8] = 0;
    pseudo[9] = IPPROTO_TCP;
    pseudo[10] = 0;
    pseudo[11] = 20;
    uint32_t partial = (uint16_t)~checksum(pseudo, sizeof pseudo, 0);
    sum = checksum(tcp, 20, partial);
    tcp[16] = (uint8_t)(sum >> 8);
    tcp[17] = (uint8_t)sum;
    if (sendto(fd, packet, sizeof packet, 0, (struct sockaddr *)&to, sizeof to) != (ssize_t)sizeof packet) {
      fprintf(stderr, "tickle: sendto on %s: %s\n", device, strerror(errno));
      close(fd);
      return 1;
    }
  }
  close(fd);
  return 0;
}
