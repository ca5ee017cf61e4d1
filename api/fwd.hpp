#pragma once
/// Forward declarations the facades' headers share, so that a trainer including them
/// does not pull in CAF or the actors layer.

namespace caf {
class actor;
class actor_system;
class actor_system_config;
}  // namespace caf

namespace apiary {

namespace actors {
class Gateway;
class NcclGroup;
class RoleHost;
struct PsCounters;
}  // namespace actors

class Runtime;

}  // namespace apiary
