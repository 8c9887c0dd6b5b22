// What gryph-broker answers on its admin endpoint (admin_server.h) and writes to its metrics
// file (metrics.h), per role. Every function runs on the loop thread, where the nodes live.
//
// Admin commands (one line each; answers are JSON, {"error": "..."} for a refusal):
//   stats                     the node's counters and, for a PHB, its pubends
//   subscriptions             SHB: every durable subscription with its state and lag
//   subscription NAME         SHB: one subscription, with its backlog in events per pubend
//   delete NAME               SHB: deletes the subscription (its session ends; it holds no
//                             release upstream any more)
//   help                      the commands

#ifndef GRYPH_PROGRAMS_BROKER_ADMIN_H_
#define GRYPH_PROGRAMS_BROKER_ADMIN_H_

#include <string>

#include "gryph/intermediate_broker.h"
#include "gryph/publisher_hosting_broker.h"
#include "gryph/subscriber_hosting_broker.h"
#include "gryph/zmq_channel.h"
#include "programs/metrics.h"

namespace gryph::programs {

std::string AnswerShb(SubscriberHostingBroker& shb, const ZmqChannel& channel,
                      const std::string& request);
std::string AnswerPhb(PublisherHostingBroker& phb, const ZmqChannel& channel,
                      const std::string& request);
std::string AnswerIb(const IntermediateBroker& ib, const ZmqChannel& channel,
                     const std::string& request);

void AddShbMetrics(SubscriberHostingBroker& shb, MetricsText* out);
void AddPhbMetrics(PublisherHostingBroker& phb, MetricsText* out);
void AddIbMetrics(const IntermediateBroker& ib, MetricsText* out);
void AddChannelMetrics(const ZmqChannel& channel, MetricsText* out);

}  // namespace gryph::programs

#endif  // GRYPH_PROGRAMS_BROKER_ADMIN_H_
