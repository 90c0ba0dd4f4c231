//! The stored responses (`store: true`, the default): what `previous_response_id` continues
//! and `GET /v1/responses/{id}` returns. In memory, bounded: an entry lives
//! `server.responses_store_ttl`, and beyond `server.responses_store_entries` the oldest go
//! first. A restart forgets them all.
//!
//! One task owns the map ([`Entries`], a pure structure given the time); handlers talk to it
//! through a channel ([`ResponseStore`]), so no lock is ever held, let alone across an await.
//! A conversation is a chain of [`Turn`]s sharing their ancestors (`Arc`), so a chain of N
//! responses holds each turn once, not N times.

use crate::server::types::responses::ResponseObject;
use crate::server::types::ChatMessage;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// One response's part of a conversation: its input messages and its output (as an assistant
/// message), after its parent's.
#[derive(Debug)]
pub struct Turn {
    pub parent: Option<Arc<Turn>>,
    pub messages: Vec<ChatMessage>,
    /// How many of `messages` came from the request's input (the rest is its output).
    pub input_len: usize,
}

impl Turn {
    /// The whole conversation up to and including this turn, oldest first.
    pub fn conversation(self: &Arc<Turn>) -> Vec<ChatMessage> {
        let mut chain = Vec::new();
        let mut at = Some(self);
        while let Some(t) = at {
            chain.push(t);
            at = t.parent.as_ref();
        }
        chain
            .into_iter()
            .rev()
            .flat_map(|t| t.messages.iter().cloned())
            .collect()
    }
}

/// A stored response.
#[derive(Debug)]
pub struct Stored {
    pub response: ResponseObject,
    pub turn: Arc<Turn>,
}

/// The map, its age order and its bounds; the owner passes the time in.
pub struct Entries {
    map: HashMap<String, (Instant, Arc<Stored>)>,
    /// Ids in insertion order (some since deleted or replaced: skipped when they come up).
    order: VecDeque<(Instant, String)>,
    cap: usize,
    ttl: Duration,
}

impl Entries {
    pub fn new(cap: usize, ttl: Duration) -> Entries {
        Entries {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
            ttl,
        }
    }

    /// Drops what expired and what is over the cap (oldest first).
    fn prune(&mut self, now: Instant) {
        while let Some((at, id)) = self.order.front() {
            let expired = now.saturating_duration_since(*at) >= self.ttl;
            let over = self.map.len() > self.cap || self.order.len() > 2 * self.cap.max(1);
            if !expired && !over {
                break;
            }
            let (at, id) = (*at, id.clone());
            self.order.pop_front();
            if self.map.get(&id).is_some_and(|(t, _)| *t == at) {
                self.map.remove(&id);
            }
        }
    }

    pub fn put(&mut self, now: Instant, s: Arc<Stored>) {
        if self.cap == 0 {
            return;
        }
        let id = s.response.id.clone();
        self.order.push_back((now, id.clone()));
        self.map.insert(id, (now, s));
        self.prune(now);
    }

    pub fn get(&mut self, now: Instant, id: &str) -> Option<Arc<Stored>> {
        self.prune(now);
        self.map.get(id).map(|(_, s)| Arc::clone(s))
    }

    pub fn delete(&mut self, now: Instant, id: &str) -> bool {
        self.prune(now);
        self.map.remove(id).is_some()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

enum Command {
    Put(Arc<Stored>),
    Get(String, oneshot::Sender<Option<Arc<Stored>>>),
    Delete(String, oneshot::Sender<bool>),
}

/// The handle to the store's task, started on first use (inside the server's runtime); the
/// task ends when the last handle is dropped.
pub struct ResponseStore {
    cap: usize,
    ttl: Duration,
    tx: OnceLock<mpsc::UnboundedSender<Command>>,
}

impl ResponseStore {
    /// At most `cap` entries (0: nothing is stored), each kept `ttl`.
    pub fn new(cap: usize, ttl: Duration) -> ResponseStore {
        ResponseStore {
            cap,
            ttl,
            tx: OnceLock::new(),
        }
    }

    fn tx(&self) -> &mpsc::UnboundedSender<Command> {
        self.tx.get_or_init(|| {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut entries = Entries::new(self.cap, self.ttl);
            tokio::spawn(async move {
                while let Some(cmd) = rx.recv().await {
                    let now = Instant::now();
                    match cmd {
                        Command::Put(s) => entries.put(now, s),
                        Command::Get(id, reply) => {
                            let _ = reply.send(entries.get(now, &id));
                        }
                        Command::Delete(id, reply) => {
                            let _ = reply.send(entries.delete(now, &id));
                        }
                    }
                }
            });
            tx
        })
    }

    /// Stores `s` (without waiting: callable from a stream's last event).
    pub fn put(&self, s: Stored) {
        if self.cap > 0 {
            let _ = self.tx().send(Command::Put(Arc::new(s)));
        }
    }

    pub async fn get(&self, id: &str) -> Option<Arc<Stored>> {
        let (reply, rx) = oneshot::channel();
        self.tx().send(Command::Get(id.to_string(), reply)).ok()?;
        rx.await.ok().flatten()
    }

    /// True when it was there.
    pub async fn delete(&self, id: &str) -> bool {
        let (reply, rx) = oneshot::channel();
        if self
            .tx()
            .send(Command::Delete(id.to_string(), reply))
            .is_err()
        {
            return false;
        }
        rx.await.unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::types::responses::{ResponsesToolChoice, TextConfig};
    use crate::server::types::{MessageContent, Role};

    fn stored(id: &str, parent: Option<Arc<Turn>>, text: &str) -> Arc<Stored> {
        Arc::new(Stored {
            response: ResponseObject {
                id: id.to_string(),
                object: "response".to_string(),
                created_at: 0,
                status: "completed".to_string(),
                error: None,
                incomplete_details: None,
                instructions: None,
                max_output_tokens: None,
                model: "m".to_string(),
                output: Vec::new(),
                parallel_tool_calls: true,
                previous_response_id: None,
                store: true,
                temperature: None,
                top_p: None,
                tool_choice: ResponsesToolChoice::Mode("auto".to_string()),
                tools: Vec::new(),
                text: TextConfig::default(),
                truncation: "disabled".to_string(),
                metadata: Default::default(),
                user: None,
                usage: None,
                reasoning: None,
            },
            turn: Arc::new(Turn {
                input_len: 1,
                parent,
                messages: vec![ChatMessage {
                    role: Role::User,
                    content: Some(MessageContent::Text(text.to_string())),
                    name: None,
                    tool_call_id: None,
                    tool_calls: None,
                    tool_responses: None,
                }],
            }),
        })
    }

    #[test]
    fn entries_expire_and_the_oldest_go_over_the_cap() {
        let t0 = Instant::now();
        let mut e = Entries::new(2, Duration::from_secs(10));
        e.put(t0, stored("a", None, "1"));
        e.put(t0 + Duration::from_secs(1), stored("b", None, "2"));
        e.put(t0 + Duration::from_secs(2), stored("c", None, "3"));
        assert_eq!(e.len(), 2);
        assert!(e.get(t0 + Duration::from_secs(2), "a").is_none());
        assert!(e.get(t0 + Duration::from_secs(2), "b").is_some());
        // b was stored at 1 s: gone at 11 s; c stays until 12 s.
        assert!(e.get(t0 + Duration::from_secs(11), "b").is_none());
        assert!(e.get(t0 + Duration::from_secs(11), "c").is_some());
        assert!(e.delete(t0 + Duration::from_secs(11), "c"));
        assert!(!e.delete(t0 + Duration::from_secs(11), "c"));
        assert!(e.is_empty());
        let mut none = Entries::new(0, Duration::from_secs(10));
        none.put(t0, stored("a", None, "1"));
        assert!(none.get(t0, "a").is_none());
    }

    #[test]
    fn deleted_ids_do_not_grow_the_order_without_bound() {
        let t0 = Instant::now();
        let mut e = Entries::new(3, Duration::from_secs(1000));
        for i in 0..100 {
            let id = format!("r{i}");
            e.put(t0, stored(&id, None, "x"));
            assert!(e.delete(t0, &id));
        }
        assert!(e.order.len() <= 6, "{}", e.order.len());
    }

    #[test]
    fn a_chain_is_its_turns_in_order() {
        let a = stored("a", None, "1");
        let b = stored("b", Some(Arc::clone(&a.turn)), "2");
        let c = stored("c", Some(Arc::clone(&b.turn)), "3");
        let texts: Vec<String> = c
            .turn
            .conversation()
            .iter()
            .map(|m| m.content.as_ref().unwrap().text())
            .collect();
        assert_eq!(texts, ["1", "2", "3"]);
    }
}
