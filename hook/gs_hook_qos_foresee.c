/* gs_hook_qos_foresee.c — see gs_hook_qos_foresee.h. */
#include "gs_hook_qos_foresee.h"

#define US 1000ull

/* How long after its time a request is still waited for. */
static uint64_t late_ns(uint64_t lead_ns, uint64_t period_ns)
{
        return lead_ns + period_ns / GS_FORESEE_LATE_DIV;
}

void gs_foresee_arrival(struct gs_foresee *f, uint64_t now, struct gs_foresee_next *ret)
{
        uint64_t base = now;

        *ret = (struct gs_foresee_next){ 0 };
        if (f->last_ns && now > f->last_ns) {
                uint64_t x = now - f->last_ns;

                if (f->period_ns && x > 2 * f->period_ns && x <= GS_FORESEE_MAX_PERIOD_US * US) {
                        /* A pause of a few periods (requests that did not
                         * come): the rhythm kept, not learnt from it. */
                } else if (x < GS_FORESEE_MIN_PERIOD_US * US || x > GS_FORESEE_MAX_PERIOD_US * US) {
                        /* A pause or a burst: another rhythm, if any. */
                        f->period_ns = f->dev_ns = 0;
                        f->n = 0;
                } else if (!f->period_ns) {
                        /* The deviation starts at a quarter of the
                         * period: regularity is shown, not assumed. */
                        f->period_ns = x;
                        f->dev_ns = x / 4;
                        f->n = 1;
                } else {
                        int64_t d = (int64_t)x - (int64_t)f->period_ns;
                        int64_t ad = d < 0 ? -d : d;

                        f->period_ns = (uint64_t)((int64_t)f->period_ns + d / 8);
                        f->dev_ns = (uint64_t)((int64_t)f->dev_ns + (ad - (int64_t)f->dev_ns) / 8);
                        if (f->n < UINT32_MAX)
                                f->n++;
                }
        }
        f->last_ns = now;
        if (f->n >= GS_FORESEE_MIN_INTERVALS && f->dev_ns * 8 <= f->period_ns) {
                ret->period_us = (uint32_t)(f->period_ns / US);
                ret->lead_us = (uint32_t)(2 * f->dev_ns / US + GS_FORESEE_SLACK_US);
                uint64_t lead = (uint64_t)ret->lead_us * US;

                /* Late past the lead (within the late window), once: the
                 * schedule kept.  Within the lead, or late twice running
                 * (a server that waits for its last answer before the
                 * next: its rhythm moved), from the arrival. */
                if (f->next_ns && now > f->next_ns + lead && now - f->next_ns <= late_ns(lead, f->period_ns) &&
                    !f->kept) {
                        base = f->next_ns;
                        f->kept = 1;
                } else {
                        f->kept = 0;
                }
                ret->next_ns = base + f->period_ns;
        }
        f->next_ns = ret->next_ns;
}

/* Whether what a process published is usable at now: a period learnt,
 * a lead it could have computed, and an arrival neither past by more than
 * the late window (the request late, the process gone) nor further ahead
 * than a period and its lead.  Anything else (another clock, a hostile writer) is
 * ignored: no foresight, the plain bound. */
static int usable(const struct gs_foresee_next *p, uint64_t now)
{
        uint64_t lead = (uint64_t)p->lead_us * US, per = (uint64_t)p->period_us * US;

        return p->next_ns && p->period_us >= GS_FORESEE_MIN_PERIOD_US && p->period_us <= GS_FORESEE_MAX_PERIOD_US &&
               p->lead_us <= p->period_us / 4 + GS_FORESEE_SLACK_US && p->next_ns + late_ns(lead, per) > now &&
               p->next_ns <= now + per + lead;
}

enum gs_foresee_do gs_foresee_decide(const struct gs_foresee_next *pub, uint64_t now, uint64_t inflight, uint64_t est)
{
        uint64_t lead, per, h;

        if (!usable(pub, now))
                return GS_FORESEE_NONE;
        lead = (uint64_t)pub->lead_us * US;
        per = (uint64_t)pub->period_us * US;
        /* A launch longer than a quarter of the period would be held most
         * of each: it runs as without foresight. */
        if (est > per / 4)
                return GS_FORESEE_NONE;
        h = pub->next_ns > lead ? pub->next_ns - lead : 0;
        if (now + inflight + est <= h)
                return GS_FORESEE_ADMIT;
        return inflight ? GS_FORESEE_DRAIN : GS_FORESEE_HOLD;
}

int gs_foresee_soon(const struct gs_foresee_next *pub, uint64_t now, uint64_t within_ns)
{
        uint64_t lead = (uint64_t)pub->lead_us * US;

        return usable(pub, now) && pub->next_ns <= now + within_ns + lead;
}
