//! Create and update with Kubernetes semantics: names and generateName, uid and timestamps,
//! resourceVersion preconditions, status subresource split, generation, finalizers,
//! validation (typed for built-ins, schema for custom resources) and managed fields.

use std::sync::Arc;

use rand::Rng;
use serde_json::{json, Value};

use super::convert::to_storage;
use super::crd;
use super::delete::finalizers;
use super::error::{ApiError, ApiResult};
use super::fieldset::Scope;
use super::list_semantics::ListSemantics;
use super::list_type;
use super::managed::{self, Writer};
use super::resource::{Builtin, ResourceRef, ResourceType};
use super::schema;
use super::store::{rv_of, Store};
use super::validate;

/// Options every write carries.
#[derive(Debug, Clone)]
pub(crate) struct WriteOpts {
    pub dry_run: bool,
    pub manager: String,
    /// `fieldValidation=Strict`: unknown fields are an error instead of being dropped.
    pub strict: bool,
    pub now: String,
    /// Seeding: keep `status` as given on create (tests set up running pods directly).
    pub keep_status: bool,
}

impl WriteOpts {
    pub(crate) fn new(manager: &str, now: String) -> Self {
        WriteOpts { dry_run: false, manager: manager.to_string(), strict: false, now, keep_status: false }
    }
}

/// How the managed fields of a write are to be tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tracking {
    /// An ordinary write: the writer takes over the fields it changed.
    Update,
    /// Server-side apply already computed them.
    Applied,
}

pub(crate) fn scope_of(rt: &ResourceType, version: &str, subresource: Option<&str>) -> Scope {
    match subresource {
        Some("status") => Scope::StatusOnly,
        _ if rt.has_status(version) => Scope::AllButStatus,
        _ => Scope::Everything,
    }
}

fn generate_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

/// The part of an object that `metadata.generation` tracks.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    v
}

fn without_volatile(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("managedFields");
        m.remove("resourceVersion");
    }
    v
}

impl Store {
    /// Type checks, schema defaulting/pruning, and type-specific rules shared by create and update
    /// (`old` is the stored object an update replaces).
    fn admit(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOpts,
    ) -> ApiResult<()> {
        validate::metadata(rt, obj)?;
        if rt.builtin.is_some() {
            validate::builtin(rt, obj)?;
        } else if let Some(schema) = rt.version(rt.preferred_version()).and_then(|v| v.schema.as_ref()) {
            let mut outcome = schema::apply(obj, schema);
            outcome.errors.extend(list_type::on_write(obj, old, schema));
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            if opts.strict && !outcome.pruned.is_empty() {
                let causes: Vec<(String, String)> = outcome
                    .pruned
                    .iter()
                    .map(|f| (f.clone(), "field not declared in schema".to_string()))
                    .collect();
                return Err(ApiError::new(400, "BadRequest", format!("{} in version \"{}\" cannot be handled as a {}: strict decoding error: unknown field \"{}\"", rt.kind, rt.preferred_version(), rt.kind, outcome.pruned.join("\", \"")))
                    .with_details(json!({"name": name, "kind": rt.kind, "causes": causes_json(&causes)})));
            }
            if !outcome.errors.is_empty() {
                return Err(ApiError::invalid(&rt.kind, &name, outcome.errors));
            }
        }
        if rt.is(Builtin::CustomResourceDefinition) {
            let resource = crd::resource_from_crd(obj, &self.registry)?;
            if let Some(existing) =
                self.registry.lookup(&resource.group, resource.preferred_version(), &resource.plural)
            {
                if existing.builtin.is_some() {
                    return Err(ApiError::invalid(
                        "CustomResourceDefinition",
                        obj["metadata"]["name"].as_str().unwrap_or(""),
                        vec![(
                            "spec.names.plural".into(),
                            format!("Invalid value: \"{}\": is served by a built-in type", resource.plural),
                        )],
                    ));
                }
            }
            let computed = crd::established_status(obj, &opts.now);
            if obj["status"]["acceptedNames"] != computed["acceptedNames"]
                || obj["status"]["storedVersions"] != computed["storedVersions"]
            {
                obj["status"] = computed;
            }
        }
        Ok(())
    }

    pub(crate) fn create(
        &mut self,
        rt: &ResourceRef,
        version: &str,
        path_ns: Option<&str>,
        body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        self.create_tracked(rt, version, path_ns, body, opts, Tracking::Update)
    }

    pub(crate) fn create_tracked(
        &mut self,
        rt: &ResourceRef,
        version: &str,
        path_ns: Option<&str>,
        body: Value,
        opts: &WriteOpts,
        tracking: Tracking,
    ) -> ApiResult<Arc<Value>> {
        if !body.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} create must be a JSON object",
                rt.kind
            )));
        }
        check_type_meta(rt, version, &body)?;
        let mut obj = to_storage(rt, body);
        let meta = obj["metadata"].as_object_mut().map(std::mem::take).unwrap_or_default();
        obj["metadata"] = Value::Object(meta);
        let ns = namespace_for(rt, path_ns, &obj)?;
        if rt.namespaced {
            obj["metadata"]["namespace"] = json!(ns);
            self.check_namespace_open(&ns)?;
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        if let Some(m) = obj["metadata"].as_object_mut() {
            for k in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "selfLink",
            ] {
                m.remove(k);
            }
            if tracking == Tracking::Update {
                m.remove("managedFields");
            }
        }
        let explicit_name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let generate = obj["metadata"]["generateName"].as_str().unwrap_or("").to_string();
        if explicit_name.is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                "",
                vec![("metadata.name".into(), "Required value: name or generateName is required".into())],
            ));
        }
        let name = if explicit_name.is_empty() {
            let mut attempt = format!("{generate}{}", generate_suffix());
            while self.get(&rt.storage, &ns, &attempt).is_some() {
                attempt = format!("{generate}{}", generate_suffix());
            }
            attempt
        } else {
            explicit_name
        };
        obj["metadata"]["name"] = json!(name);
        obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
        obj["metadata"]["creationTimestamp"] = json!(opts.now);
        obj["metadata"]["generation"] = json!(1);
        if !opts.keep_status {
            reset_status_on_create(rt, version, &mut obj);
        }
        if rt.is(Builtin::Namespace) {
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            obj["status"]["phase"] = json!("Active");
        }
        self.admit(rt, &mut obj, None, opts)?;
        if self.get(&rt.storage, &ns, &name).is_some() {
            return Err(ApiError::already_exists(&rt.qualified(), &name));
        }
        let writer = Writer {
            manager: &opts.manager,
            api_version: &rt.api_version(version),
            subresource: "",
            scope: scope_of(rt, version, None),
            now: &opts.now,
        };
        if tracking == Tracking::Update {
            managed::record_update(None, &mut obj, &writer, ListSemantics::new(rt, version));
        }
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        if rt.is(Builtin::PodDisruptionBudget) {
            obj["status"] = self.pdb_status(&obj, None, &opts.now);
        }
        let stored = self.put(&rt.storage, obj);
        self.after_write(rt, &stored, &opts.now);
        Ok(stored)
    }

    #[allow(clippy::too_many_arguments)] // the pieces of one PUT request
    /// PUT of a whole object (main resource or `status`).
    pub(crate) fn update(
        &mut self,
        rt: &ResourceRef,
        version: &str,
        ns: &str,
        name: &str,
        body: Value,
        subresource: Option<&str>,
        opts: &WriteOpts,
    ) -> ApiResult<Arc<Value>> {
        if !body.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} update must be a JSON object",
                rt.kind
            )));
        }
        check_type_meta(rt, version, &body)?;
        let body_name = body["metadata"]["name"].as_str().unwrap_or("");
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let old = self
            .get(&rt.storage, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.qualified(), name))?;
        self.commit_update(rt, version, &old, to_storage(rt, body), subresource, opts, Tracking::Update)
    }

    /// The shared tail of update, patch and apply: `new` is the full proposed object in storage form.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn commit_update(
        &mut self,
        rt: &ResourceRef,
        version: &str,
        old: &Arc<Value>,
        mut new: Value,
        subresource: Option<&str>,
        opts: &WriteOpts,
        tracking: Tracking,
    ) -> ApiResult<Arc<Value>> {
        let name = old["metadata"]["name"].as_str().unwrap_or("").to_string();
        let ns = old["metadata"]["namespace"].as_str().unwrap_or("").to_string();
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        let new_name = new["metadata"]["name"].as_str().unwrap_or("");
        if new_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({new_name}) does not match the name on the URL ({name})"
            )));
        }
        let new_ns = new["metadata"]["namespace"].as_str().unwrap_or("");
        if rt.namespaced && !new_ns.is_empty() && new_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        if let Some(rv) = new["metadata"]["resourceVersion"].as_str().filter(|s| !s.is_empty()) {
            // kube-apiserver (1.33 to 1.37) answers a resourceVersion that is not a number with a bare 500
            // (its etcd3 store fails to parse it; tests/k8s/differential.rs), not a 409.
            if rv.parse::<u64>().is_err() {
                return Err(ApiError::new(
                    500,
                    "",
                    format!("strconv.ParseUint: parsing \"{rv}\": invalid syntax"),
                ));
            }
            if rv.parse::<u64>().ok() != Some(rv_of(old)) {
                return Err(ApiError::stale(&rt.qualified(), &name));
            }
        }
        // Seeding replaces the whole object, status included.
        let scope = if opts.keep_status { Scope::Everything } else { scope_of(rt, version, subresource) };
        match scope {
            Scope::StatusOnly => {
                let status = new.get("status").cloned();
                let managed_fields = new["metadata"]["managedFields"].take();
                new = (**old).clone();
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        new.as_object_mut().map(|m| m.remove("status"));
                    }
                }
                if tracking == Tracking::Applied {
                    new["metadata"]["managedFields"] = managed_fields;
                }
            }
            Scope::AllButStatus => match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            },
            Scope::Everything => {}
        }
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ] {
            match old["metadata"].get(k) {
                Some(v) => new["metadata"][k] = v.clone(),
                None => {
                    new["metadata"].as_object_mut().map(|m| m.remove(k));
                }
            }
        }
        if tracking == Tracking::Update {
            new["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
            if new["metadata"]["managedFields"].is_null() {
                new["metadata"].as_object_mut().map(|m| m.remove("managedFields"));
            }
        }
        let deleting = !old["metadata"]["deletionTimestamp"].is_null();
        if deleting {
            let before = finalizers(old);
            if let Some(added) = finalizers(&new).into_iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid(&rt.kind, &name, vec![("metadata.finalizers".into(),
                    format!("Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"))]));
            }
        }
        if rt.is(Builtin::Pod) && scope != Scope::StatusOnly && !opts.keep_status {
            validate::pod_spec_update(&name, old, &new)?;
        }
        self.admit(rt, &mut new, Some(&**old), opts)?;
        if rt.is(Builtin::CustomResourceDefinition) && scope == Scope::StatusOnly {
            // The server owns a CRD's status; keep what it computed.
            new["status"] = old["status"].clone();
        }
        if spec_part(&new) != spec_part(old) {
            new["metadata"]["generation"] = json!(old["metadata"]["generation"].as_i64().unwrap_or(1) + 1);
        }
        if tracking == Tracking::Update {
            let writer = Writer {
                manager: &opts.manager,
                api_version: &rt.api_version(version),
                subresource: subresource.unwrap_or(""),
                scope,
                now: &opts.now,
            };
            managed::record_update(Some(old), &mut new, &writer, ListSemantics::new(rt, version));
        }
        if rt.is(Builtin::PodDisruptionBudget) && scope != Scope::StatusOnly {
            new["status"] = self.pdb_status(&new, old.get("status"), &opts.now);
        }
        if without_volatile(&new) == without_volatile(old) {
            return Ok(old.clone());
        }
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if opts.dry_run {
            return Ok(Arc::new(new));
        }
        if deleting && finalizers(&new).is_empty() && !self.namespace_has_content(rt, &name) {
            let gone = self.remove_object(rt, &ns, &name, Some(new), &opts.now);
            return gone.ok_or_else(|| ApiError::not_found(&rt.qualified(), &name));
        }
        let stored = self.put(&rt.storage, new);
        self.after_write(rt, &stored, &opts.now);
        Ok(stored)
    }

    /// Hooks that keep derived state in step: served CRD types, PDB status.
    pub(crate) fn after_write(&mut self, rt: &ResourceType, stored: &Arc<Value>, now: &str) {
        if rt.is(Builtin::CustomResourceDefinition) {
            if let Ok(resource) = crd::resource_from_crd(stored, &self.registry) {
                self.registry.register(resource);
            }
        }
        if rt.is(Builtin::Pod) {
            let ns = stored["metadata"]["namespace"].as_str().unwrap_or("").to_string();
            self.refresh_pdbs(&ns, now);
        }
    }

    pub(crate) fn check_namespace_open(&self, ns: &str) -> ApiResult<()> {
        let key = super::resource::StorageKey::new("", "namespaces");
        match self.get(&key, "", ns) {
            None => Err(ApiError::not_found("namespaces", ns)),
            Some(n) if !n["metadata"]["deletionTimestamp"].is_null() => Err(ApiError::forbidden(format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ))
            .with_details(json!({"name": ns, "kind": "namespaces", "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]}))),
            Some(_) => Ok(()),
        }
    }
}

fn causes_json(causes: &[(String, String)]) -> Value {
    Value::Array(
        causes
            .iter()
            .map(|(f, m)| json!({"reason": "FieldValueUnknown", "field": f, "message": m}))
            .collect(),
    )
}

fn check_type_meta(rt: &ResourceType, version: &str, body: &Value) -> ApiResult<()> {
    let expected = rt.api_version(version);
    if let Some(av) = body["apiVersion"].as_str().filter(|s| !s.is_empty()) {
        if av != expected {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({expected})"
            )));
        }
    }
    if let Some(kind) = body["kind"].as_str().filter(|s| !s.is_empty()) {
        if kind != rt.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    Ok(())
}

fn namespace_for(rt: &ResourceType, path_ns: Option<&str>, obj: &Value) -> ApiResult<String> {
    if !rt.namespaced {
        return Ok(String::new());
    }
    let body_ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    match path_ns {
        Some(p) if !body_ns.is_empty() && body_ns != p => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        Some(p) => Ok(p.to_string()),
        None if !body_ns.is_empty() => Ok(body_ns.to_string()),
        None => Err(ApiError::bad_request(format!(
            "{} is namespaced: create it under /namespaces/{{namespace}}/",
            rt.plural
        ))),
    }
}

/// What Kubernetes keeps of `status` on create.
fn reset_status_on_create(rt: &ResourceType, version: &str, obj: &mut Value) {
    match rt.builtin {
        Some(Builtin::Pod) => obj["status"] = json!({"phase": "Pending", "qosClass": qos_class(obj)}),
        Some(Builtin::Node | Builtin::Namespace) => {}
        _ if rt.has_status(version) => {
            obj.as_object_mut().map(|m| m.remove("status"));
        }
        _ => {}
    }
}

fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = pod["spec"]["containers"].as_array().into_iter().flatten().collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        any |=
            req.as_object().is_some_and(|m| !m.is_empty()) || lim.as_object().is_some_and(|m| !m.is_empty());
        for r in ["cpu", "memory"] {
            let l = &lim[r];
            let q = if req[r].is_null() { l } else { &req[r] };
            if l.is_null() || q != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}
