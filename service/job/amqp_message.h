/*
 * amqp_message.h - what a job's message is on the AMQP wire: the names of
 * the basic properties and headers this service reads and writes, and the
 * size they take in the message's content header, and the message built
 * from a job.
 *
 * Why a module of its own: three places speak about the same names and
 * bytes. The HTTP validation (job.c) checks a job's properties against the
 * table and refuses one whose properties could never fit in one
 * content-header frame, the publisher (amqp_publisher.c) has amqpm_build
 * make that frame and check it against the broker's frame_max, and the
 * ingest (ingest_map.c) turns a delivery's properties back into a job's.
 * With one table and one calculator they cannot drift apart.
 *
 * The table, the rules and the calculator (amqp_message.c) are pure: no
 * socket, no connection, no allocation; they need rabbitmq-c's headers for
 * the property layout but none of its functions, so job.c stays fuzzable
 * on its own (tests/fuzz). Building a job's message from them
 * (amqpm_build, amqp_message_build.c) takes its tables from a rabbitmq-c
 * pool, so it is a file apart, under this same contract.
 */
#ifndef RMQS_AMQP_MESSAGE_H
#define RMQS_AMQP_MESSAGE_H

#include <amqp.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "rmqs.h"
#include "timeutil.h"

#define AMQPM_SHORTSTR_MAX 255 /* an AMQP short string: names, properties */

/* Headers the publisher sets on every message (a job's own header of the
 * same name is dropped), and the timing headers the ingest consumes. */
#define AMQPM_HDR_JOB_ID "x-scheduler-job-id"
#define AMQPM_HDR_SCHEDULED_AT "x-scheduled-at"
#define AMQPM_HDR_DELAY "x-delay"
#define AMQPM_HDR_DELIVER_AT "x-deliver-at"
/* On the runs of a recurring schedule only: its name, and the fire time
 * (RFC 3339 UTC, ms) the run is for. */
#define AMQPM_HDR_SCHEDULE "x-scheduler-schedule"
#define AMQPM_HDR_FIRE_TIME "x-scheduler-fire-time"

/* One short-string basic property, by its name in a job's "properties". */
typedef struct amqpm_str_prop {
    const char *name;  /* "content_type", ... */
    amqp_flags_t flag; /* AMQP_BASIC_..._FLAG */
    size_t offset;     /* of its amqp_bytes_t in amqp_basic_properties_t */
} amqpm_str_prop;

/* Every short-string property a job carries; expiration is the last entry
 * (the publisher also takes it as an integer, so it treats it apart). */
extern const amqpm_str_prop amqpm_str_props[];
extern const size_t amqpm_n_str_props;

/* The two other properties a job carries: priority, an integer from 0 to
 * AMQPM_PRIORITY_MAX, and persistent, a boolean (delivery_mode 2, the
 * default, or 1). */
#define AMQPM_PROP_PRIORITY "priority"
#define AMQPM_PROP_PERSISTENT "persistent"
#define AMQPM_PRIORITY_MAX 255

/* Whether name is a property a job may carry: one of amqpm_str_props,
 * priority or persistent. The one list job.c validates against. */
bool amqpm_property_known(const char *name);

/*
 * The one rule for expiration (the per-message TTL), checked by job.c when
 * a job is accepted and by the publisher before it sends: a string of 1 to
 * 10 decimal digits, at most AMQPM_EXPIRATION_MAX milliseconds, as
 * RabbitMQ takes it (anything else makes it close the channel).
 */
#define AMQPM_EXPIRATION_MAX 4294967295ULL
bool amqpm_expiration_valid(json_t *v);

/* The amqp_bytes_t of property i inside props (borrowed from props). */
amqp_bytes_t *amqpm_str_prop_field(amqp_basic_properties_t *props, size_t i);
const amqp_bytes_t *amqpm_str_prop_cfield(const amqp_basic_properties_t *props,
                                          size_t i);

/* Whether a header of this name is one the publisher sets itself (exact
 * match, as the broker and the publisher compare names). */
bool amqpm_reserved_header(const char *name);

/* Whether RabbitMQ refuses a message with this header whatever its scalar
 * value, closing the publish channel under every publish in flight with
 * a reply that names no job: CC and BCC (sender-selected distribution)
 * must be lists of routing keys, which a job's headers cannot carry. */
bool amqpm_broker_refused_header(const char *name);

/*
 * Bytes the properties and headers of a job's message take in its content
 * header, counted as rabbitmq-c's encoder writes them (AMQP 0-9-1 section
 * 4.2.5, as amqpm_build builds them): property flags, delivery mode,
 * each short-string property (1 + length), priority, the default message_id (id_len bytes, the job
 * id) when props has none, and the header table: 4, then per entry
 * 1 + name + 1 (kind) + value (a long string 4 + length, an integer or a
 * double 8, a boolean 1, null nothing, a table or array 4 + its entries),
 * plus the three headers the publisher adds, x-delay counted as a 64-bit
 * integer (the most it takes). A job header with a reserved name is not
 * counted (it is not sent). headers and props may be NULL; nesting is
 * bounded by the caller's validation.
 */
size_t amqpm_encoded_size(json_t *headers, json_t *props, size_t id_len);

/* ------------------------------------------------------------------------ */
/* Building a job's message (amqp_message_build.c)                          */

#define AMQPM_FRAME_OVERHEAD 8 /* a frame's type, channel, size, end marker */

struct job;

/* A job's message ready to send: the properties and the storage they point
 * into (alive as long as the job and the pool are). */
typedef struct amqpm_message {
    amqp_basic_properties_t props;
    char scheduled_at[TU_RFC3339_LEN + 1];
    char fire_time[TU_RFC3339_LEN + 1]; /* runs of a recurring schedule */
} amqpm_message;

/*
 * Fill m->props for job (pointers into the job, m and pool): the job's
 * properties by the table above (expiration by amqpm_expiration_valid's
 * rule), message_id defaulted to the job id, the job's headers and the
 * publisher's own, checked to fit in a content-header frame of frame_max
 * bytes. Returns RMQS_OK; RMQS_EINVAL with err filled when the job cannot
 * be encoded (its result is then decided without the broker: retrying
 * cannot help); RMQS_ENOMEM when the pool cannot grow.
 */
rmqs_rc amqpm_build(const struct job *job, int frame_max, amqp_pool_t *pool,
                    amqpm_message *m, rmqs_error *err);

#endif
