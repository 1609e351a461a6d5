use lazarus::Actor;
use serde::{Deserialize, Serialize};

#[derive(Actor, Serialize, Deserialize)]
struct Mute;

fn main() {}
