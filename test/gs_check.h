/* gs_check.h — the one way every check suite runs: fork mode unless
 * CK_FORK=no (for gdb), exit status = whether any test failed (or none
 * ran: a CK_RUN_CASE that names no case). */
#ifndef GS_CHECK_H
#define GS_CHECK_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

static inline int gs_check_run(Suite *s)
{
        SRunner *sr = srunner_create(s);
        int failed;

        srunner_set_fork_status(sr, CK_FORK_GETENV);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        /* CK_RUN_CASE naming no case runs nothing: that is no pass. */
        if (srunner_ntests_run(sr) == 0) {
                fprintf(stderr, "no test ran (CK_RUN_SUITE=%s CK_RUN_CASE=%s)\n", getenv("CK_RUN_SUITE") ?: "",
                        getenv("CK_RUN_CASE") ?: "");
                failed = 1;
        }
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
