#pragma once
/// `apiary ps` with a mixed strategy: some variables under PSSynchronizers, the others
/// under AllReduceSynchronizers (Parallax puts sparse variables on parameter servers and
/// all-reduces the dense ones; a hand-written strategy may mix them any way, one kind
/// per variable). The PS processes (--role ps) plan from the strategy's PS part
/// (core::collective::ps_part) and serve only the PS variables. Every replica keeps its
/// own copy of the all-reduced variables; each step, bulk-synchronously, it (one
/// apiary::Replica with both plans, apps/ps_replica.cpp's loop)
///  1. pulls the PS variables,
///  2. computes the gradients of the whole model on its batch,
///  3. pushes the PS variables' gradients (a sparse variable's as the rows it touched),
///  4. averages the all-reduced variables' gradients with the other replicas' and
///     applies its optimizer.
/// A replica process needs every replica's address for the collective, given as
/// `--peers replica:DEVICE=HOST:PORT` (the replica listens on its own entry); the PS
/// devices come, as in a PS job, from `--peers DEVICE=HOST:PORT` or the job's DHT.
/// --embedded runs the PS devices and the replicas in one process.
#include <string>
#include <vector>

#include "apps/ps_roles.hpp"
#include "core/collective/ar_plan.hpp"
#include "core/ps/plan.hpp"

namespace apiary::apps {

/// The --peers prefix naming a replica's collective address in a mixed job:
/// `replica:<device>=HOST:PORT`.
inline constexpr const char* k_replica_peer_prefix = "replica:";

/// Runs a mixed job's replica (--role chief|worker) or, with --embedded, the whole job:
/// `ar` is the strategy's all-reduce plan (ArPlan::ps_variables not empty), `ps` the
/// training plan of its PS part. Prints one line per step and the final parameters of
/// every variable, like the PS and all-reduce jobs. Returns the exit code (2 bad usage,
/// 1 failure).
int run_mixed_job(const ps_roles::PsArgs& a, const core::collective::ArPlan& ar, core::ps::TrainingPlan ps);

/// Prints how the mixed job splits the model ("mixed plan: ...") and its all-reduce plan.
void print_mixed_plan(const core::collective::ArPlan& ar, const core::ps::TrainingPlan& ps);

}  // namespace apiary::apps
