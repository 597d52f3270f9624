//! The simulator's state: namespaces.

use super::*;

impl State {
    pub fn namespaces(&self) -> Vec<Namespace> {
        self.namespaces.clone()
    }

    pub(super) fn ns_index(&self, id: &str) -> Result<usize, ApiError> {
        self.namespaces
            .iter()
            .position(|n| n.id == id)
            .ok_or_else(|| ApiError::not_found("namespace"))
    }

    pub fn namespace(&self, id: &str) -> Result<Namespace, ApiError> {
        Ok(self.namespaces[self.ns_index(id)?].clone())
    }

    /// `POST /namespaces`.
    pub fn create_namespace(&mut self, name: &str, labels: Labels) -> Result<Namespace, ApiError> {
        let valid = !name.is_empty()
            && name.len() <= 253
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-');
        if !valid {
            return Err(ApiError::bad_request(format!(
                "namespace name {name:?} must match ^[a-z0-9.\\-]{{1,253}}$"
            )));
        }
        if self.namespaces.iter().any(|n| n.name == name) {
            return Err(ApiError::new(409, "already exists"));
        }
        let now = self.now();
        let ns = Namespace {
            id: new_id(),
            name: name.to_string(),
            labels: labels.into(),
            created_at: now,
            updated_at: now,
            version: self.bump(),
        };
        self.namespaces.push(ns.clone());
        Ok(ns)
    }

    pub(super) fn ensure_namespace(&mut self, name: &str) -> Result<String, ApiError> {
        match self.namespaces.iter().find(|n| n.name == name) {
            Some(n) => Ok(n.id.clone()),
            None => self.create_namespace(name, Labels::new()).map(|n| n.id),
        }
    }

    /// `PUT /namespaces/{id}`.
    pub fn update_namespace(&mut self, id: &str, b: &WriteBody, ignore: bool) -> Result<Namespace, ApiError> {
        let i = self.ns_index(id)?;
        self.check_body_version(&self.namespaces[i].version, b.version.as_deref(), ignore)?;
        let version = self.bump();
        let now = self.now();
        let ns = &mut self.namespaces[i];
        ns.labels = b.labels.clone().into();
        ns.version = version;
        ns.updated_at = now;
        Ok(ns.clone())
    }

    /// `DELETE /namespaces/{id}`: 404, 412, 409 while it holds volumes.
    pub fn delete_namespace(&mut self, id: &str, v: &DeleteVersion) -> Result<(), ApiError> {
        let i = self.ns_index(id)?;
        self.check_delete_version(&self.namespaces[i].version, v)?;
        if self.volumes.iter().any(|vol| vol.namespace_id == id) {
            return Err(ApiError::new(409, "in use: the namespace still holds volumes"));
        }
        self.namespaces.remove(i);
        Ok(())
    }
}
