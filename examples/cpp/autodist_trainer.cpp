// A C++ trainer of its own model through apiary::AutoDistJob: softmax regression with a
// sparse embedding feature (each sample's id looks up one row of `emb`), its gradients
// computed by hand, synchronized as the AutoDist strategy says (PS shards, all-reduce,
// or both). One process per replica of the resource spec:
//
//   apiary_autodist_trainer --spec resource_spec.yml --builder PSLoadBalancing --rank R
//       [--port 15000] [--steps 20] [--batch 16] [--lr 0.5] [--out params.txt]
//   apiary_autodist_trainer --reference --replicas 4 [--steps ...] [--out ref.txt]
//
// Every replica's batch for step s is drawn from seed s * replicas + rank, so
// `--reference` (one process, SGD on the concatenation of every replica's batch of each
// step) trains on the same samples; each process writes its final parameters, one line
// per variable ("name v0 v1 ..."), for a comparison.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "api/autodist.hpp"

namespace {

constexpr int k_features = 8;
constexpr int k_classes = 4;
constexpr int k_ids = 100;

struct Args {
  std::string spec;
  std::string builder = "PSLoadBalancing";
  int rank = 0;
  int port = 15000;
  int steps = 20;
  int batch = 16;
  float lr = 0.5F;
  std::string out;
  bool reference = false;
  int replicas = 4;
};

struct Batch {
  std::vector<float> x;    // batch * features
  std::vector<int> ids;    // batch
  std::vector<int> label;  // batch
};

/// Replica `rank`'s batch of step `step`: features ~ N(0, 1), an id, and the label a
/// fixed linear teacher gives the features plus an id-dependent shift.
Batch make_batch(int step, int rank, int replicas, int batch) {
  std::mt19937 gen(static_cast<std::uint32_t>(step * replicas + rank));
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::uniform_int_distribution<int> id(0, k_ids - 1);
  Batch b;
  for (int i = 0; i < batch; ++i) {
    float score[k_classes] = {};
    for (int f = 0; f < k_features; ++f) {
      const float v = normal(gen);
      b.x.push_back(v);
      for (int c = 0; c < k_classes; ++c) score[c] += v * static_cast<float>(((f + 1) * (c + 2)) % 5 - 2);
    }
    const int i_id = id(gen);
    b.ids.push_back(i_id);
    score[i_id % k_classes] += 1.0F;
    b.label.push_back(static_cast<int>(std::max_element(score, score + k_classes) - score));
  }
  return b;
}

using Params = std::map<std::string, std::vector<float>>;

/// Initial parameters: small values from `seed` (replica 0's start the job).
Params initial(int seed) {
  std::mt19937 gen(static_cast<std::uint32_t>(1000 + seed));
  std::uniform_real_distribution<float> u(-0.1F, 0.1F);
  Params p;
  for (auto [name, n] : {std::pair<const char*, int>{"w", k_features * k_classes}, {"b", k_classes},
                         {"emb", k_ids * k_classes}}) {
    auto& v = p[name];
    for (int i = 0; i < n; ++i) v.push_back(u(gen));
  }
  return p;
}

/// The mean softmax cross-entropy gradient over `b` (the rows of emb it touched in
/// `rows`, not in the dense map); returns the mean loss.
double gradients(const Params& p, const Batch& b, Params& g, apiary::core::ps::SparseGradient& rows) {
  const int n = static_cast<int>(b.ids.size());
  g["w"].assign(k_features * k_classes, 0.0F);
  g["b"].assign(k_classes, 0.0F);
  std::map<int, std::vector<float>> touched;
  double loss = 0;
  for (int i = 0; i < n; ++i) {
    float logit[k_classes];
    for (int c = 0; c < k_classes; ++c) {
      logit[c] = p.at("b")[c] + p.at("emb")[b.ids[i] * k_classes + c];
      for (int f = 0; f < k_features; ++f) logit[c] += b.x[i * k_features + f] * p.at("w")[f * k_classes + c];
    }
    const float top = *std::max_element(logit, logit + k_classes);
    float sum = 0;
    for (float& l : logit) sum += (l = std::exp(l - top));
    loss -= std::log(logit[b.label[i]] / sum);
    auto& row = touched[b.ids[i]];
    row.resize(k_classes, 0.0F);
    for (int c = 0; c < k_classes; ++c) {
      const float d = (logit[c] / sum - (c == b.label[i] ? 1.0F : 0.0F)) / static_cast<float>(n);
      g["b"][c] += d;
      row[c] += d;
      for (int f = 0; f < k_features; ++f) g["w"][f * k_classes + c] += b.x[i * k_features + f] * d;
    }
  }
  rows.rows.clear();
  rows.values.clear();
  for (const auto& [id, values] : touched) {
    rows.rows.push_back(id);
    rows.values.insert(rows.values.end(), values.begin(), values.end());
  }
  return loss / n;
}

void write(const Params& p, const std::string& out) {
  std::ofstream f(out);
  for (const auto& [name, values] : p) {
    f << name;
    char buf[32];
    for (float v : values) {
      std::snprintf(buf, sizeof(buf), " %.9g", static_cast<double>(v));
      f << buf;
    }
    f << "\n";
  }
}

/// One process, SGD on every replica's batch of each step together.
int reference(const Args& a) {
  Params p = initial(0);
  for (int step = 0; step < a.steps; ++step) {
    Batch all;
    for (int r = 0; r < a.replicas; ++r) {
      Batch b = make_batch(step, r, a.replicas, a.batch);
      all.x.insert(all.x.end(), b.x.begin(), b.x.end());
      all.ids.insert(all.ids.end(), b.ids.begin(), b.ids.end());
      all.label.insert(all.label.end(), b.label.begin(), b.label.end());
    }
    Params g;
    apiary::core::ps::SparseGradient rows;
    const double loss = gradients(p, all, g, rows);
    for (const char* name : {"w", "b"}) {
      for (std::size_t i = 0; i < p[name].size(); ++i) p[name][i] -= a.lr * g[name][i];
    }
    for (std::size_t k = 0; k < rows.rows.size(); ++k) {
      for (int c = 0; c < k_classes; ++c) p["emb"][rows.rows[k] * k_classes + c] -= a.lr * rows.values[k * k_classes + c];
    }
    std::printf("step %d loss %.4f\n", step, loss);
  }
  if (!a.out.empty()) write(p, a.out);
  return 0;
}

int train(const Args& a) {
  apiary::AutoDistOptions o;
  o.resource_spec = a.spec;
  o.builder = a.builder;
  o.variables = {{"w", {k_features, k_classes}, false}, {"b", {k_classes}, false}, {"emb", {k_ids, k_classes}, true}};
  o.optimizer.learning_rate = a.lr;  // plain SGD
  o.rank = a.rank;
  o.port = static_cast<std::uint16_t>(a.port);
  o.initial = initial(a.rank);  // replica 0's start the job
  o.job = "example.autodist." + a.builder;
  auto job = apiary::AutoDistJob::start(std::move(o));
  if (!job) {
    std::cerr << "replica " << a.rank << ": " << job.error().message << "\n";
    return 1;
  }
  auto& j = **job;
  if (a.rank == 0) std::cout << j.summary() << std::flush;
  const int replicas = static_cast<int>(j.replicas());
  Params p;
  Params g;  // lent to each push and handed back, its memory kept
  if (auto st = j.pull_into(p); !st) {
    std::cerr << "replica " << a.rank << ": " << st.error().message << "\n";
    return 1;
  }
  for (int step = 0; step < a.steps; ++step) {
    const Batch b = make_batch(step, a.rank, replicas, a.batch);
    apiary::core::ps::SparseGradient rows;
    const double loss = gradients(p, b, g, rows);
    auto pushed = j.push_lent(g, static_cast<double>(b.ids.size()), {{"emb", std::move(rows)}});
    auto pulled = pushed ? j.pull_into(p) : pushed;
    if (!pulled) {
      std::cerr << "replica " << a.rank << " at step " << step << ": " << pulled.error().message << "\n";
      return 1;
    }
    if (a.rank == 0) std::printf("step %d loss %.4f\n", step, loss);
  }
  if (auto st = j.leave(); !st) {
    std::cerr << "replica " << a.rank << ": " << st.error().message << "\n";
    return 1;
  }
  if (!a.out.empty()) write(p, a.out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << flag << ": expected a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&]() {
      const std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0') {
        std::cerr << flag << ": expected a whole number, got " << v << "\n";
        std::exit(2);
      }
      return static_cast<int>(n);
    };
    if (flag == "--spec") a.spec = value();
    else if (flag == "--builder") a.builder = value();
    else if (flag == "--rank") a.rank = number();
    else if (flag == "--port") a.port = number();
    else if (flag == "--steps") a.steps = number();
    else if (flag == "--batch") a.batch = number();
    else if (flag == "--lr") a.lr = std::strtof(value().c_str(), nullptr);
    else if (flag == "--out") a.out = value();
    else if (flag == "--reference") a.reference = true;
    else if (flag == "--replicas") a.replicas = number();
    else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (a.steps < 0 || a.batch < 1 || !(a.lr > 0) || a.replicas < 1 || a.port < 1 || a.port > 65535) {
    std::cerr << "expected --steps >= 0, --batch >= 1, --lr > 0, --replicas >= 1 and a port in 1..65535\n";
    return 2;
  }
  if (a.reference) return reference(a);
  if (a.spec.empty()) {
    std::cerr << "expected --spec (AutoDist's resource_spec.yml)\n";
    return 2;
  }
  return train(a);
}
