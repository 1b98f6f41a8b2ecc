/* check_ctl.c — common/gs_ctl.h: the control socket's frame, the one
 * definition the agent's control server and gsharectl/the plugins share:
 * sizes at and past the bounds, headers a hostile peer writes, frames cut
 * anywhere, two frames back to back, a peer that stops reading. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gs_check.h"
#include "gs_ctl.h"

static void pair(int sv[2])
{
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void put_hdr(uint8_t *h, uint32_t len)
{
        h[0] = (uint8_t)len;
        h[1] = (uint8_t)(len >> 8);
        h[2] = (uint8_t)(len >> 16);
        h[3] = (uint8_t)(len >> 24);
}

START_TEST(test_frame_size_bounds)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;
        size_t size = 0;
        char *big;

        /* An empty message packs to nothing: no frame has length 0. */
        ck_assert_int_eq(gs_ctl_frame_size(&rep.base, &size), -EINVAL);
        rep.error = -5;
        ck_assert_int_eq(gs_ctl_frame_size(&rep.base, &size), 0);
        ck_assert_uint_eq(size, GS_CTL_HDR + protobuf_c_message_get_packed_size(&rep.base));
        /* Past GS_CTL_MAX_MSG: refused, size untouched. */
        big = malloc(GS_CTL_MAX_MSG + 1);
        memset(big, 'x', GS_CTL_MAX_MSG);
        big[GS_CTL_MAX_MSG] = '\0';
        rep.message = big;
        size = 7;
        ck_assert_int_eq(gs_ctl_frame_size(&rep.base, &size), -EMSGSIZE);
        ck_assert_uint_eq(size, 7);
        free(big);
}
END_TEST

START_TEST(test_frame_len_hostile_headers)
{
        static const uint32_t bad[] = { 0, GS_CTL_MAX_MSG + 1, 0x7fffffffu, 0x80000000u, 0xffffffffu };
        uint8_t h[GS_CTL_HDR];
        uint32_t len = 42;

        for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
                put_hdr(h, bad[i]);
                ck_assert_int_eq(gs_ctl_frame_len(h, &len), -EMSGSIZE);
                ck_assert_uint_eq(len, 42); /* untouched */
        }
        put_hdr(h, 1);
        ck_assert_int_eq(gs_ctl_frame_len(h, &len), 0);
        ck_assert_uint_eq(len, 1);
        put_hdr(h, GS_CTL_MAX_MSG);
        ck_assert_int_eq(gs_ctl_frame_len(h, &len), 0);
        ck_assert_uint_eq(len, GS_CTL_MAX_MSG);
        /* Little-endian, byte by byte. */
        memcpy(h, "\x01\x02\x03\x00", 4);
        ck_assert_int_eq(gs_ctl_frame_len(h, &len), 0);
        ck_assert_uint_eq(len, 0x030201);
}
END_TEST

START_TEST(test_round_trip_back_to_back)
{
        GsCtlReply a = GSHARE__CTL__V1__REPLY__INIT, b = GSHARE__CTL__V1__REPLY__INIT, *got = NULL;
        int sv[2];

        pair(sv);
        a.error = -1;
        a.message = (char *)"first";
        b.error = -2;
        b.message = (char *)"second";
        ck_assert_int_eq(gs_ctl_send(sv[0], &a.base, 1000), 0);
        ck_assert_int_eq(gs_ctl_send(sv[0], &b.base, 1000), 0);
        /* Each read takes exactly one frame. */
        ck_assert_int_eq(gs_ctl_recv_reply(sv[1], 1000, &got), 0);
        ck_assert_int_eq(got->error, -1);
        ck_assert_str_eq(got->message, "first");
        gs_ctl_reply_free(got);
        ck_assert_int_eq(gs_ctl_recv_reply(sv[1], 1000, &got), 0);
        ck_assert_int_eq(got->error, -2);
        ck_assert_str_eq(got->message, "second");
        gs_ctl_reply_free(got);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

/* The peer closes at every point of a frame: never a frame, always
 * -ECONNRESET, the outputs untouched. */
START_TEST(test_cut_anywhere)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;
        uint8_t frame[64], *buf = (uint8_t *)"untouched";
        size_t size, len = 99;

        rep.error = -3;
        rep.message = (char *)"cut me";
        ck_assert_int_eq(gs_ctl_frame_size(&rep.base, &size), 0);
        ck_assert_uint_le(size, sizeof(frame));
        gs_ctl_frame_pack(&rep.base, frame, size);
        for (size_t cut = 0; cut < size; cut++) {
                int sv[2];
                pair(sv);
                ck_assert_int_eq(write(sv[0], frame, cut), (ssize_t)cut);
                close(sv[0]);
                ck_assert_int_eq(gs_ctl_recv_frame(sv[1], 1000, &buf, &len), -ECONNRESET);
                ck_assert_str_eq((char *)buf, "untouched");
                ck_assert_uint_eq(len, 99);
                close(sv[1]);
        }
}
END_TEST

/* A hostile header: refused before any allocation or read of the body. */
START_TEST(test_hostile_length_and_body)
{
        uint8_t h[GS_CTL_HDR + 3];
        GsCtlReply *rep = NULL;
        uint8_t *buf = NULL;
        size_t len = 0;
        int sv[2];

        pair(sv);
        put_hdr(h, 0xffffffffu);
        ck_assert_int_eq(write(sv[0], h, GS_CTL_HDR), GS_CTL_HDR);
        ck_assert_int_eq(gs_ctl_recv_frame(sv[1], 1000, &buf, &len), -EMSGSIZE);
        ck_assert_ptr_null(buf);
        put_hdr(h, 0);
        ck_assert_int_eq(write(sv[0], h, GS_CTL_HDR), GS_CTL_HDR);
        ck_assert_int_eq(gs_ctl_recv_frame(sv[1], 1000, &buf, &len), -EMSGSIZE);
        /* A whole frame whose body is no Reply. */
        put_hdr(h, 3);
        memcpy(h + GS_CTL_HDR, "\xff\xff\xff", 3);
        ck_assert_int_eq(write(sv[0], h, sizeof(h)), (ssize_t)sizeof(h));
        ck_assert_int_eq(gs_ctl_recv_reply(sv[1], 1000, &rep), -EBADMSG);
        ck_assert_ptr_null(rep);
        /* Half a header, then nothing: the deadline, not a hang. */
        ck_assert_int_eq(write(sv[0], h, 2), 2);
        ck_assert_int_eq(gs_ctl_recv_frame(sv[1], 50, &buf, &len), -ETIMEDOUT);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

/* A peer that never reads: the send gives up at its deadline; a peer
 * gone: -EPIPE, and no SIGPIPE kills us. */
START_TEST(test_send_to_stuck_or_gone_peer)
{
        GsCtlReply rep = GSHARE__CTL__V1__REPLY__INIT;
        char *big = malloc(GS_CTL_MAX_MSG - 16);
        int sv[2];

        memset(big, 'y', GS_CTL_MAX_MSG - 17);
        big[GS_CTL_MAX_MSG - 17] = '\0';
        rep.message = big;
        pair(sv);
        ck_assert_int_eq(gs_ctl_send(sv[0], &rep.base, 50), -ETIMEDOUT);
        close(sv[1]);
        ck_assert_int_eq(gs_ctl_send(sv[0], &rep.base, 1000), -EPIPE);
        close(sv[0]);
        free(big);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("ctl");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_frame_size_bounds);
        tcase_add_test(tc, test_frame_len_hostile_headers);
        tcase_add_test(tc, test_round_trip_back_to_back);
        tcase_add_test(tc, test_cut_anywhere);
        tcase_add_test(tc, test_hostile_length_and_body);
        tcase_add_test(tc, test_send_to_stuck_or_gone_peer);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return gs_check_run(suite());
}
