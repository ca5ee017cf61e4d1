// `apiary identity create|show FILE`: manage Ed25519 node identities.
#include <cstdio>

#include "apps/commands.hpp"
#include "messages/identity/key_file.hpp"
#include "messages/identity/peer_id.hpp"

namespace apiary::apps {

Command add_identity_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("identity", "Create or show an Ed25519 node identity (libp2p key file, mode 0600)");
  cmd->require_subcommand(1);
  auto file = std::make_shared<std::string>();
  auto* create = cmd->add_subcommand("create", "Create a new identity file (refuses to overwrite)");
  create->add_option("file", *file, "Path of the key file")->required();
  auto* show = cmd->add_subcommand("show", "Print the PeerID of an identity file");
  show->add_option("file", *file, "Path of the key file")->required();
  return [=]() {
    const char* what = create->parsed() ? "create" : "show";
    auto key = messages::load_key_file(*file);
    if (create->parsed()) {
      if (key) {
        std::fprintf(stderr, "apiary identity create: %s already exists; not overwriting it\n", file->c_str());
        return 1;
      }
      key = messages::Ed25519PrivateKey::generate();
      if (key) {
        if (auto st = messages::save_key_file(*file, *key); !st) key = st.error();
      }
    }
    if (!key) {
      std::fprintf(stderr, "apiary identity %s: %s\n", what, key.error().what().c_str());
      return 1;
    }
    std::printf("%s\n", messages::PeerId::from_public_key(key->public_key()).to_string().c_str());
    return 0;
  };
}

}  // namespace apiary::apps
